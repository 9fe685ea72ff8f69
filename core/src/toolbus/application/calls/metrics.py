"""Recording toolbus's Prometheus metrics for agent sessions and tool calls.

prometheus-client is an optional extra (``pip install 'toolbus[metrics]'``).
Without it every recording method is a no-op, so code can record
unconditionally. Which metrics there are, their labels and when each moves:
docs/audit-and-metrics.md; their definitions:
:mod:`~toolbus.application.calls.instruments`; the ``/metrics`` endpoint:
:mod:`~toolbus.application.calls.metrics_server`. Every label value comes from a set the
configuration defines (tools, services, groups and states of the registry and
the front door's permissions and entry states; the wire protocol's error
types; the models in use); anything else is counted as ``"other"``, so that no
request can add a series, let alone grow the metrics without bound.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from toolbus.application.calls.instruments import (
    CALL_SECONDS_BUCKETS,
    NOOP,
    prometheus_available,
    registered,
)
from toolbus.application.calls.service_metrics import ServiceCallCollector, ServiceCallRecorder
from toolbus.domain.config.registry import UNDEFINED_STATE, WILDCARD
from toolbus.domain.errors import ERROR_TYPES

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
    "budget-spent",
}
OK = "ok"
ERROR = "error"

#: GenAI's operation name for a model turn of the agent loop.
CHAT = "chat"


class _Bounded:
    """One label's known values; any other value is counted as :data:`OTHER`."""

    __slots__ = ("known",)

    def __init__(self, known: Iterable[str] = ()) -> None:
        self.known: frozenset[str] = frozenset(known)

    def __call__(self, value: str | None) -> str:
        return value if value is not None and value in self.known else OTHER


class ToolbusMetrics:
    """Records every toolbus metric, registered in one prometheus ``CollectorRegistry``.

    ``ToolbusMetrics()`` registers in prometheus-client's default registry (the
    one :func:`~toolbus.application.calls.metrics_server.start_metrics_server`
    serves); use :func:`default_metrics` for the
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
        self._limit = _Bounded()
        self._extra_groups: frozenset[str] = frozenset()
        self._extra_states: frozenset[str] = frozenset()
        self._last_registry: Registry | None = None
        self._registry_lock = threading.Lock()
        self._service_calls: ServiceCallCollector | None = None
        self._service_recorders: dict[str, ServiceCallRecorder] = {}
        self._children: dict[tuple[Any, tuple[str, ...]], Any] = {}
        self.instruments = NOOP
        if self.enabled:
            from prometheus_client import REGISTRY

            target = REGISTRY if registry is None else registry
            self.registry = target
            self.instruments = registered(target)
            # Recorded on every request a service answers: plain counters behind a
            # collector rather than prometheus metric objects (see service_metrics).
            self._service_calls = ServiceCallCollector(CALL_SECONDS_BUCKETS, self._error_type)
            target.register(self._service_calls)

    @classmethod
    def disabled(cls) -> ToolbusMetrics:
        """An instance that records nothing."""
        return cls(enabled=False)

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
            self.instruments.group_availability.clear()
            for group, members in registry.groups().items():
                self.instruments.group_availability.labels(group=group).set(len(members))
            self.instruments.state_availability.clear()
            for state, count in per_state.items():
                self.instruments.state_availability.labels(state=state).set(count)

    def know_models(self, *models: str) -> None:
        """Models and providers the process uses (an agent loop's): they may be label values."""
        self._model = _Bounded(self._model.known | set(models))

    def know_limits(self, *names: str) -> None:
        """The names of a door's limits and budgets: they may be label values."""
        self._limit = _Bounded(self._limit.known | set(names))

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
            self._labelled(self.instruments.requests, self._group(group)).inc()
        self.instruments.filtered_tools.observe(offered)

    def access_denied_for(self, denied: Iterable[str]) -> None:
        """A session request was refused; ``denied`` are the groups it may not have."""
        denied = tuple(denied)
        for group in denied:
            self.instruments.access_denied.labels(group=self._group(group)).inc()
        reason = "wildcard" if WILDCARD in denied else "groups"
        self.instruments.escalations.labels(reason=reason).inc()

    def call_refused(self, tool: str | None, reason: str) -> None:
        """A call named a tool not offered now. ``reason``: state, group or unknown.

        A tool outside the session's groups also counts as an escalation attempt:
        the caller reached for something its request did not cover.
        """
        self.instruments.invalid_transitions.labels(tool=self._tool(tool), reason=reason).inc()
        if reason == "group":
            self.instruments.escalations.labels(reason="tool").inc()

    def call_checked(self, tool: str, outcome: str) -> None:
        """A call the policy forbade (``forbidden``), or one that waited for approval and was
        ``approved``, ``denied`` or ``expired``."""
        self.instruments.call_checks.labels(tool=self._tool(tool), outcome=outcome).inc()

    def state_changed(
        self, tool: str, from_state: str, to_state: str, seconds_in_from: float, offered: int
    ) -> None:
        """A successful call moved a session from one state to another."""
        self._labelled(
            self.instruments.transitions,
            self._tool(tool),
            self._state(from_state),
            self._state(to_state),
        ).inc()
        self._labelled(self.instruments.state_duration, self._state(from_state)).observe(
            seconds_in_from
        )
        self.instruments.filtered_tools.observe(offered)

    def session_closed(self, state: str, seconds_in_state: float) -> None:
        """A session ended in ``state`` after ``seconds_in_state`` there."""
        self._labelled(self.instruments.state_duration, self._state(state)).observe(
            seconds_in_state
        )

    # ------------------------------------------------------------- the agent loop

    def agent_request_ended(self, outcome: str, iterations: int) -> None:
        """The agent loop finished a request: ``outcome`` is ``answer`` or the error type."""
        self.instruments.loop_requests.labels(outcome=self._outcome(outcome)).inc()
        self.instruments.loop_iterations.observe(iterations)

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
        self.instruments.model_duration.labels(*labels, error).observe(seconds)
        if error_type is None:
            self.instruments.model_tokens.labels(*labels, "input").observe(input_tokens)
            self.instruments.model_tokens.labels(*labels, "output").observe(output_tokens)

    # ------------------------------------------------------------- tool calls

    def tool_call(self, tool: str, service: str, seconds: float, error_type: str | None) -> None:
        """An agent session's call went over the bus; ``error_type`` ``None`` means success."""
        outcome = OK if error_type is None else ERROR
        tool, service = self._tool(tool), self._service(service)
        self._labelled(self.instruments.tool_calls, tool, service, outcome).inc()
        self._labelled(self.instruments.tool_call_duration, tool, service).observe(seconds)
        if error_type is not None:
            self.instruments.tool_call_errors.labels(
                tool=tool, service=service, error_type=self._error_type(error_type)
            ).inc()

    def call_retried(self, service: str, error_type: str) -> None:
        """A client sends a call again after ``error_type`` (a wire type, or ``connection``)."""
        self.instruments.call_retries.labels(
            service=service, error_type=self._error_type(error_type)
        ).inc()

    def dead_lettered(self, service: str, reason: str) -> None:
        """A service host moved a request to its dead letters; ``reason`` is from a fixed set."""
        self.instruments.dead_letters.labels(service=service, reason=reason).inc()

    def answer_unpublished(self, service: str, outcome: str) -> None:
        """A service host could not publish an answer: ``handed-back`` or ``lost``."""
        self.instruments.unpublished_answers.labels(service=service, outcome=outcome).inc()

    def limit_refused(self, limit: str, refused: str) -> None:
        """A limit or budget refused a ``tool-call`` or a ``model-turn``."""
        self.instruments.limit_refusals.labels(name=self._limit(limit), refused=refused).inc()

    def cost_spent(self, kind: str, name: str, amount: float) -> None:
        """A ``tool`` call or a ``model`` turn (``name``) cost ``amount``."""
        bounded = self._tool(name) if kind == "tool" else self._model(name)
        self._labelled(self.instruments.costs, kind, bounded).inc(amount)

    def cache_lookup(self, tool: str, result: str) -> None:
        """A cached tool's call was answered from the cache (``hit``) or made (``miss``)."""
        self._labelled(self.instruments.cache_lookups, self._tool(tool), result).inc()

    def record_refused(self, namespace: str) -> None:
        """A door refused a record of its state store (namespaces are the door's own: bounded)."""
        self.instruments.refused_records.labels(namespace=namespace).inc()

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
            return ServiceCallRecorder(service, CALL_SECONDS_BUCKETS, self._error_type)
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
