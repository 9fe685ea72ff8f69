"""uvicorn inside a toolbus command, stopped by the command's signals rather than its own.

It also holds what every HTTP door checks of a request's credential
(:func:`several_authorizations`).

A long-running ``toolbus`` command catches SIGTERM and SIGINT itself
(:func:`toolbus.cli.plugin_api.stop_signals`) so that it stops the same way as
every other and exits 0. uvicorn would install its own handlers over them while
it serves, and re-raise the signal once it has shut down: the process would then
end by the signal (exit 143 or 130). :class:`CommandServer` leaves the signals
to the command, which calls :meth:`CommandServer.shut_down`: the shutdown
uvicorn makes on a signal, event streams (sse-starlette's) told to end included.

Needs uvicorn, which the distributions that serve HTTP depend on.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable, Iterator

import uvicorn

from toolbus._internal.heap import settle_heap


class CommandServer(uvicorn.Server):
    """A ``uvicorn.Server`` that installs no signal handlers; :meth:`shut_down` stops it."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        settle_heap()  # the app is built and its lifespan has run: what is left stays

    def shut_down(self) -> None:
        """Stop accepting, end open event streams, finish what is in flight (up to the
        configured graceful timeout), and return from :meth:`serve`."""
        self.should_exit = True
        _end_event_streams(True)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().serve(sockets)
        finally:
            _end_event_streams(False)  # a server started later in this process streams


def _end_event_streams(end: bool) -> None:
    """Tell sse-starlette's streams (the gateway's and the MCP SDK's) to end, or not.

    It learns of a shutdown from uvicorn's signal handler, which a command's server
    does not install; its documented switch is a flag for the whole process.
    """
    try:
        from sse_starlette.sse import AppStatus
    except ImportError:  # nothing streams
        return
    AppStatus.should_exit = end


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as host and port; ValueError says what is
    wrong. Port 0 has the system choose a free port, which the start-up line names."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(
            f"--listen {listen!r} is not HOST:PORT; give HOST:PORT, e.g. 127.0.0.1:8080 "
            "(port 0: a free one)"
        )
    return host.strip("[]"), int(port)


def bind(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (an IPv6 host too), for ``serve(sockets=[...])``.

    Bound here rather than by uvicorn, which exits the process when it cannot: the
    command can say why in one line (:func:`cannot_listen`). Connections made
    before uvicorn accepts wait in the socket's backlog, so the command may say it
    is ready as soon as this returns.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


def cannot_listen(host: str, port: int, exc: OSError, option: str = "--listen") -> str:
    """What to say when :func:`bind` failed."""
    return (
        f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another {option} "
        "address or stop what uses it"
    )


#: What a request with more than one ``Authorization`` header is answered (400).
SEVERAL_AUTHORIZATIONS = (
    "the request has more than one Authorization header, so it names more than one "
    "caller; send exactly one"
)


def several_authorizations(headers: Iterable[tuple[bytes, bytes]]) -> bool:
    """Whether an ASGI request's ``headers`` hold more than one ``Authorization`` header.

    Such a request is refused whole: one reader takes the first, another the last,
    and who the caller is must not depend on which path reads it. (ASGI servers
    give header names in lower case.)
    """
    seen = False
    for name, _ in headers:
        if name == b"authorization":
            if seen:
                return True
            seen = True
    return False
