"""The ``/metrics`` endpoint, with ``/healthz`` and ``/readyz``: :func:`start_metrics_server`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from toolbus.application.calls.health import Readiness
from toolbus.domain.errors import ToolbusError


class MetricsUnavailable(ToolbusError, RuntimeError):
    """prometheus-client is not installed, and something needs it."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs prometheus-client; install it with: pip install 'toolbus[metrics]'"
        )


@dataclass(slots=True)
class MetricsServer:
    """A running ``/metrics`` HTTP endpoint (a daemon thread). ``close()`` stops it."""

    host: str
    port: int
    _server: Any
    _thread: Any

    def close(self) -> None:
        """Stop serving and release the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def start_metrics_server(
    port: int,
    addr: str = "127.0.0.1",
    *,
    registry: Any | None = None,
    readiness: Callable[[], Readiness] | None = None,
) -> MetricsServer:
    """Serve ``/metrics``, ``/healthz`` and ``/readyz`` on ``addr:port`` from a daemon thread.

    ``port`` 0 picks a free one. ``registry`` defaults to prometheus-client's
    default registry, where :func:`default_metrics` records. ``/healthz``
    answers 200 while the process answers at all; ``/readyz`` answers 200 or
    503 with ``readiness()`` as JSON (always ready without it); any other path
    is a 404. The address defaults to loopback; pass ``"0.0.0.0"`` for a
    scraper on another machine. Raises :class:`MetricsUnavailable` without
    prometheus-client.
    """
    try:
        from prometheus_client import REGISTRY, make_wsgi_app
        from prometheus_client.exposition import ThreadingWSGIServer
    except ImportError:
        raise MetricsUnavailable("serving /metrics") from None
    metrics = make_wsgi_app(REGISTRY if registry is None else registry)
    app = _routes(metrics, readiness or (lambda: Readiness(True)))
    try:
        server = make_server(addr, port, app, ThreadingWSGIServer, handler_class=_QuietHandler)
    except OSError as exc:
        raise ToolbusError(
            f"cannot serve /metrics on {addr}:{port}: {exc.strerror or exc}; "
            "pick another port (toolbus serve --metrics-port N)"
        ) from exc
    thread = threading.Thread(target=server.serve_forever, name="toolbus-metrics", daemon=True)
    thread.start()
    return MetricsServer(addr, int(server.server_port), server, thread)


WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _routes(metrics: WSGIApp, readiness: Callable[[], Readiness]) -> WSGIApp:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/healthz":
            return _json(start_response, 200, {"status": "ok"})
        if path == "/readyz":
            state = readiness()
            body = {"ready": state.ready, "checks": state.checks}
            return _json(start_response, 200 if state.ready else 503, body)
        message = f"no such path {path!r}; this server answers /metrics, /healthz and /readyz"
        return _json(start_response, 404, {"error": message})

    return app


_STATUS = {200: "200 OK", 404: "404 Not Found", 503: "503 Service Unavailable"}


def _json(start_response: Callable[..., Any], code: int, body: object) -> list[bytes]:
    data = json.dumps(body).encode()
    headers = [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    start_response(_STATUS[code], headers)
    return [data]


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr: a scraper every few seconds would drown the service's own."""

    def log_message(self, format: str, *args: Any) -> None:
        pass
