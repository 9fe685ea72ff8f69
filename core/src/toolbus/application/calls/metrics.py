"""Prometheus metrics for agent sessions and tool calls, and the ``/metrics`` endpoint.

prometheus-client is an optional extra (``pip install 'toolbus[metrics]'``).
Without it every recording method is a no-op, so code can record
unconditionally. Which metrics there are, their labels and when each moves:
docs/audit-and-metrics.md. Every label value comes from a set the
configuration defines (tools, services, groups and states of the registry and
the front door's permissions and entry states; the wire protocol's error
types; the models in use); anything else is counted as ``"other"``, so that no
request can add a series, let alone grow the metrics without bound.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from toolbus.application.calls.health import Readiness
from toolbus.application.calls.service_metrics import ServiceCallCollector, ServiceCallRecorder
from toolbus.domain.config.registry import UNDEFINED_STATE, WILDCARD
from toolbus.domain.errors import ERROR_TYPES, ToolbusError

if TYPE_CHECKING:
    from toolbus.domain.config.registry import Registry

#: What every label value outside its known set is counted as.
OTHER = "other"
#: Error types a label names: the wire protocol's, and the failures a caller sees.
KNOWN_ERROR_TYPES = frozenset(ERROR_TYPES) | {
    "config-rejected",
    "connection",
    "model-error",
    "BusClosed",
    "MessageTooLarge",
    "ToolTimeout",
    "TimeoutError",
    "ConnectionError",
    "OSError",
}
#: How an agent request ends: an answer, or why not.
KNOWN_OUTCOMES = KNOWN_ERROR_TYPES | {
    "answer",
    "max-iterations",
    "deadline",
    "model-error",
    "state-refused",
    "too-many-sessions",
}
OK = "ok"
ERROR = "error"

_COUNT_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
_STATE_SECONDS_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
_CALL_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# The bucket boundaries OpenTelemetry's GenAI metric conventions advise.
_GEN_AI_SECONDS_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
_GEN_AI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
#: GenAI's operation name for a model turn of the agent loop.
CHAT = "chat"


class MetricsUnavailable(ToolbusError, RuntimeError):
    """prometheus-client is not installed, and something needs it."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs prometheus-client; install it with: pip install 'toolbus[metrics]'"
        )


def prometheus_available() -> bool:
    """Whether prometheus-client can be imported."""
    try:
        import prometheus_client  # noqa: F401
    except ImportError:
        return False
    return True


class _Noop:
    """Stands in for a metric, or a labelled child of one, when metrics are off."""

    def labels(self, *_: str, **__: str) -> _Noop:
        return self

    def inc(self, amount: float = 1) -> None:
        pass

    def set(self, value: float) -> None:
        pass

    def observe(self, value: float) -> None:
        pass

    def clear(self) -> None:
        pass


_NOOP = _Noop()


class _Bounded:
    """One label's known values; any other value is counted as :data:`OTHER`."""

    __slots__ = ("known",)

    def __init__(self, known: Iterable[str] = ()) -> None:
        self.known: frozenset[str] = frozenset(known)

    def __call__(self, value: str | None) -> str:
        return value if value is not None and value in self.known else OTHER


class ToolbusMetrics:
    """Every toolbus metric, registered in one prometheus ``CollectorRegistry``.

    ``ToolbusMetrics()`` registers in prometheus-client's default registry (the
    one :func:`start_metrics_server` serves); use :func:`default_metrics` for the
    process-wide instance rather than making a second one there, which
    prometheus refuses. Tests pass a private ``CollectorRegistry``.
    Without prometheus-client, or with ``enabled=False``, nothing is recorded.
    """

    def __init__(
        self,
        registry: Any | None = None,
        *,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled and prometheus_available()
        self.registry: Any | None = None
        self._tool = _Bounded()
        self._service = _Bounded()
        self._group = _Bounded((WILDCARD,))
        self._state = _Bounded((UNDEFINED_STATE,))
        self._error_type = _Bounded(KNOWN_ERROR_TYPES)
        self._outcome = _Bounded(KNOWN_OUTCOMES)
        self._model = _Bounded()
        self._extra_groups: frozenset[str] = frozenset()
        self._extra_states: frozenset[str] = frozenset()
        self._last_registry: Registry | None = None
        self._registry_lock = threading.Lock()
        self._service_calls: ServiceCallCollector | None = None
        self._service_recorders: dict[str, ServiceCallRecorder] = {}
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        if self.enabled:
            self._register(registry)
        else:
            self.requests = self.group_availability = self.filtered_tools = _NOOP
            self.transitions = self.state_duration = self.state_availability = _NOOP
            self.access_denied = self.invalid_transitions = self.escalations = _NOOP
            self.call_checks = _NOOP
            self.tool_calls = self.tool_call_duration = self.tool_call_errors = _NOOP
            self.loop_requests = self.loop_iterations = _NOOP
            self.model_duration = self.model_tokens = _NOOP
            self.call_retries = self.dead_letters = self.unpublished_answers = _NOOP

    @classmethod
    def disabled(cls) -> ToolbusMetrics:
        """An instance that records nothing."""
        return cls(enabled=False)

    def _register(self, registry: Any | None) -> None:
        from prometheus_client import REGISTRY, Counter, Gauge, Histogram

        target = REGISTRY if registry is None else registry
        self.registry = target

        def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
            return Counter(name, doc, list(labels), registry=target)

        def gauge(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
            return Gauge(name, doc, list(labels), registry=target)

        def histogram(
            name: str, doc: str, labels: Iterable[str], buckets: tuple[float, ...]
        ) -> Any:
            return Histogram(name, doc, list(labels), registry=target, buckets=buckets)

        self.requests = counter(
            "agent_tool_group_requests_total",
            "Agent sessions started, by requested tool group",
            ["group"],
        )
        self.group_availability = gauge(
            "agent_tool_group_availability",
            "Configured tools in each tool group (live configuration)",
            ["group"],
        )
        self.filtered_tools = histogram(
            "agent_filtered_tools_count",
            "Tools offered after group and state filtering, at session start and after "
            "each state change",
            [],
            _COUNT_BUCKETS,
        )
        self.transitions = counter(
            "agent_state_transitions_total",
            "State changes after successful tool calls, by tool",
            ["tool", "from_state", "to_state"],
        )
        self.state_duration = histogram(
            "agent_workflow_duration_seconds",
            "Time an agent session spent in a state before leaving it (or closing)",
            ["state"],
            _STATE_SECONDS_BUCKETS,
        )
        self.state_availability = gauge(
            "agent_state_availability",
            "Configured tools offered in each state, before group filtering (live configuration)",
            ["state"],
        )
        self.access_denied = counter(
            "agent_group_access_denied_total",
            "Tool groups refused to agent requests by the permissions",
            ["group"],
        )
        self.invalid_transitions = counter(
            "agent_invalid_state_transition_total",
            "Calls refused because the tool is not offered now (reason: state, group or unknown)",
            ["tool", "reason"],
        )
        self.escalations = counter(
            "agent_privilege_escalation_attempts_total",
            "Requests beyond a user's permissions (groups, wildcard) and calls of tools "
            "outside the session's groups (tool)",
            ["reason"],
        )
        self.call_checks = counter(
            "toolbus_call_checks_total",
            "Calls the call policy forbade, and calls that waited for approval, by tool and "
            "outcome (forbidden, approved, denied, expired)",
            ["tool", "outcome"],
        )
        self.tool_calls = counter(
            "toolbus_tool_calls_total",
            "Tool calls made by agent sessions, by outcome",
            ["tool", "service", "outcome"],
        )
        self.tool_call_duration = histogram(
            "toolbus_tool_call_duration_seconds",
            "Duration of tool calls made by agent sessions, as the caller saw it",
            ["tool", "service"],
            _CALL_SECONDS_BUCKETS,
        )
        self.tool_call_errors = counter(
            "toolbus_tool_call_errors_total",
            "Failed tool calls made by agent sessions, by error type",
            ["tool", "service", "error_type"],
        )
        self.loop_requests = counter(
            "toolbus_agent_requests_total",
            "Agent requests the agent loop finished, by outcome (answer, or the error type)",
            ["outcome"],
        )
        self.loop_iterations = histogram(
            "toolbus_agent_iterations",
            "Model turns the agent loop took per request",
            [],
            _COUNT_BUCKETS,
        )
        # OpenTelemetry's GenAI client metrics, under the names OpenTelemetry gives them
        # in Prometheus (dots as underscores, the unit as a suffix).
        self.model_duration = histogram(
            "gen_ai_client_operation_duration_seconds",
            "GenAI operation duration: the agent loop's model turns (gen_ai.client.operation"
            ".duration)",
            [
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "error_type",
            ],
            _GEN_AI_SECONDS_BUCKETS,
        )
        self.model_tokens = histogram(
            "gen_ai_client_token_usage",
            "Tokens used per GenAI operation, input and output: the agent loop's model turns "
            "(gen_ai.client.token.usage)",
            [
                "gen_ai_operation_name",
                "gen_ai_provider_name",
                "gen_ai_request_model",
                "gen_ai_token_type",
            ],
            _GEN_AI_TOKEN_BUCKETS,
        )
        self.call_retries = counter(
            "toolbus_call_retries_total",
            "Calls sent again under a retry policy, by service and the error that caused it",
            ["service", "error_type"],
        )
        self.dead_letters = counter(
            "toolbus_service_dead_letters_total",
            "Requests a service host moved to its queue's dead letters instead of serving, "
            "by reason (queued-too-long)",
            ["service", "reason"],
        )
        self.unpublished_answers = counter(
            "toolbus_service_unpublished_answers_total",
            "Answers the broker would not take: on a persistent queue the request is handed "
            "back to be answered again (handed-back), on a non-persistent one it is lost (lost)",
            ["service", "outcome"],
        )
        # Recorded on every request a service answers: plain counters behind a
        # collector rather than prometheus metric objects (see service_metrics).
        self._service_calls = ServiceCallCollector(_CALL_SECONDS_BUCKETS, self._error_type)
        target.register(self._service_calls)

    # ------------------------------------------------------------- configuration

    def observe_registry(
        self,
        registry: Registry,
        *,
        extra_groups: Iterable[str] = (),
        extra_states: Iterable[str] = (),
    ) -> None:
        """Take the label values ``registry`` defines, and set the availability gauges.

        A front door adds the groups its permissions name and its entry states.
        Cheap to call repeatedly: the work is done only for a registry (a new
        configuration snapshot) not seen last time, or new extras.
        """
        if not self.enabled:
            return  # nothing is recorded, so no label is ever chosen
        if registry is self._last_registry and not extra_groups and not extra_states:
            return  # what a session does, once per session: keep it a pointer compare
        groups, states = frozenset(extra_groups), frozenset(extra_states)
        if (
            registry is self._last_registry
            and groups <= self._extra_groups
            and states <= self._extra_states
        ):
            return
        with self._registry_lock:
            self._last_registry = registry
            self._extra_groups |= groups
            self._extra_states |= states
            per_state = _tools_per_state(registry)
            self._tool = _Bounded(registry.tools)
            self._service = _Bounded(
                [*registry.services, *(tool.type for tool in registry.tools.values())]
            )
            self._group = _Bounded([WILDCARD, *registry.groups(), *self._extra_groups])
            self._state = _Bounded([*per_state, *self._extra_states])
            self.group_availability.clear()
            for group, members in registry.groups().items():
                self.group_availability.labels(group=group).set(len(members))
            self.state_availability.clear()
            for state, count in per_state.items():
                self.state_availability.labels(state=state).set(count)

    def know_models(self, *models: str) -> None:
        """Models and providers the process uses (an agent loop's): they may be label values."""
        self._model = _Bounded(self._model.known | set(models))

    def _labelled(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)`` (in the metric's label order), kept for the next time.

        Every label value is bounded, so are the children kept; looking one up
        in prometheus-client takes a lock and builds its key on every call.
        """
        key = (metric, values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    # ------------------------------------------------------------- agent sessions

    def session_started(self, groups: Iterable[str], offered: int) -> None:
        """A session passed the access check and offers ``offered`` tools."""
        for group in groups:
            self._labelled(self.requests, self._group(group)).inc()
        self.filtered_tools.observe(offered)

    def access_denied_for(self, denied: Iterable[str]) -> None:
        """A session request was refused; ``denied`` are the groups it may not have."""
        denied = tuple(denied)
        for group in denied:
            self.access_denied.labels(group=self._group(group)).inc()
        reason = "wildcard" if WILDCARD in denied else "groups"
        self.escalations.labels(reason=reason).inc()

    def call_refused(self, tool: str | None, reason: str) -> None:
        """A call named a tool not offered now. ``reason``: state, group or unknown.

        A tool outside the session's groups also counts as an escalation attempt:
        the caller reached for something its request did not cover.
        """
        self.invalid_transitions.labels(tool=self._tool(tool), reason=reason).inc()
        if reason == "group":
            self.escalations.labels(reason="tool").inc()

    def call_checked(self, tool: str, outcome: str) -> None:
        """A call the policy forbade (``forbidden``), or one that waited for approval and was
        ``approved``, ``denied`` or ``expired``."""
        self.call_checks.labels(tool=self._tool(tool), outcome=outcome).inc()

    def state_changed(
        self, tool: str, from_state: str, to_state: str, seconds_in_from: float, offered: int
    ) -> None:
        """A successful call moved a session from one state to another."""
        self._labelled(
            self.transitions, self._tool(tool), self._state(from_state), self._state(to_state)
        ).inc()
        self._labelled(self.state_duration, self._state(from_state)).observe(seconds_in_from)
        self.filtered_tools.observe(offered)

    def session_closed(self, state: str, seconds_in_state: float) -> None:
        """A session ended in ``state`` after ``seconds_in_state`` there."""
        self._labelled(self.state_duration, self._state(state)).observe(seconds_in_state)

    # ------------------------------------------------------------- the agent loop

    def agent_request_ended(self, outcome: str, iterations: int) -> None:
        """The agent loop finished a request: ``outcome`` is ``answer`` or the error type."""
        self.loop_requests.labels(outcome=self._outcome(outcome)).inc()
        self.loop_iterations.observe(iterations)

    def model_turn(
        self,
        provider: str,
        model: str,
        seconds: float,
        input_tokens: int = 0,
        output_tokens: int = 0,
        error_type: str | None = None,
    ) -> None:
        """One model turn of the agent loop took ``seconds``; tokens only when it answered.

        ``error_type`` (empty label when ``None``) is the failure's type.
        """
        labels = (CHAT, self._model(provider), self._model(model))
        error = "" if error_type is None else self._error_type(error_type)
        self.model_duration.labels(*labels, error).observe(seconds)
        if error_type is None:
            self.model_tokens.labels(*labels, "input").observe(input_tokens)
            self.model_tokens.labels(*labels, "output").observe(output_tokens)

    # ------------------------------------------------------------- tool calls

    def tool_call(self, tool: str, service: str, seconds: float, error_type: str | None) -> None:
        """An agent session's call went over the bus; ``error_type`` ``None`` means success."""
        outcome = OK if error_type is None else ERROR
        tool, service = self._tool(tool), self._service(service)
        self._labelled(self.tool_calls, tool, service, outcome).inc()
        self._labelled(self.tool_call_duration, tool, service).observe(seconds)
        if error_type is not None:
            self.tool_call_errors.labels(
                tool=tool, service=service, error_type=self._error_type(error_type)
            ).inc()

    def call_retried(self, service: str, error_type: str) -> None:
        """A client sends a call again after ``error_type`` (a wire type, or ``connection``)."""
        self.call_retries.labels(service=service, error_type=self._error_type(error_type)).inc()

    def dead_lettered(self, service: str, reason: str) -> None:
        """A service host moved a request to its dead letters; ``reason`` is from a fixed set."""
        self.dead_letters.labels(service=service, reason=reason).inc()

    def answer_unpublished(self, service: str, outcome: str) -> None:
        """A service host could not publish an answer: ``handed-back`` or ``lost``."""
        self.unpublished_answers.labels(service=service, outcome=outcome).inc()

    def service_call(self, service: str, seconds: float, error_type: str | None = None) -> None:
        """A service host answered one request; ``error_type`` is the wire error type, if any.

        A host should record through its own :meth:`for_service` recorder instead:
        this one is shared, and so takes a lock.
        """
        with self._registry_lock:
            recorder = self._service_recorders.get(service)
            if recorder is None:
                recorder = self._service_recorders[service] = self.for_service(service)
            recorder.record(seconds, error_type)

    def for_service(self, service: str) -> ServiceCallRecorder:
        """A recorder of one host's calls of ``service``, for its per-request path.

        Use it from one event loop; every host gets its own.
        """
        if self._service_calls is None:  # metrics off: counts that nobody reads
            return ServiceCallRecorder(service, _CALL_SECONDS_BUCKETS, self._error_type)
        return self._service_calls.recorder(service)


def _tools_per_state(registry: Registry) -> dict[str, int]:
    """For each state configuration names, how many tools are offered there (any group)."""
    tools = registry.tools.values()
    states = {UNDEFINED_STATE}
    for tool in tools:
        if tool.state:
            states.add(tool.state)
        states.update(s for s in tool.applicable_states or () if s != WILDCARD)
    counts = dict.fromkeys(sorted(states), 0)
    for tool in tools:
        applicable = tool.applicable_states
        if applicable is None or WILDCARD in applicable:
            for state in counts:
                counts[state] += 1
        else:
            for state in applicable:
                counts[state] += 1
    return counts


_default: ToolbusMetrics | None = None
_default_lock = threading.Lock()


def default_metrics() -> ToolbusMetrics:
    """The process-wide metrics, in prometheus-client's default registry (no-op without it)."""
    global _default
    if _default is None:
        with _default_lock:
            if _default is None:
                _default = ToolbusMetrics()
    return _default


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
