"""Every toolbus metric: its name, help text, labels and buckets (:func:`registered`).

Which metrics there are and when each moves: docs/audit-and-metrics.md. What
is recorded, and which label values are allowed, is
:class:`~toolbus.application.calls.metrics.ToolbusMetrics`'s job; this module
only makes the prometheus-client objects, in a ``CollectorRegistry``, or
stand-ins that record nothing (:data:`NOOP`) when metrics are off.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

COUNT_BUCKETS = (0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 5000)
STATE_SECONDS_BUCKETS = (0.01, 0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
CALL_SECONDS_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# The bucket boundaries OpenTelemetry's GenAI metric conventions advise.
GEN_AI_SECONDS_BUCKETS = (
    0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92,
)  # fmt: skip
GEN_AI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip


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


@dataclass(frozen=True, slots=True)
class Instruments:
    """The metric objects, named as their metrics (``tool_calls``: ``toolbus_tool_calls_total``)."""

    requests: Any
    group_availability: Any
    filtered_tools: Any
    transitions: Any
    state_duration: Any
    state_availability: Any
    access_denied: Any
    invalid_transitions: Any
    escalations: Any
    call_checks: Any
    tool_calls: Any
    tool_call_duration: Any
    tool_call_errors: Any
    loop_requests: Any
    loop_iterations: Any
    model_duration: Any
    model_tokens: Any
    call_retries: Any
    dead_letters: Any
    unpublished_answers: Any
    refused_records: Any
    limit_refusals: Any
    costs: Any
    cache_lookups: Any


#: Instruments that record nothing.
NOOP = Instruments(*(_NOOP for _ in fields(Instruments)))


def registered(target: Any) -> Instruments:
    """Every metric, registered in ``target`` (a prometheus ``CollectorRegistry``)."""
    from prometheus_client import Counter, Gauge, Histogram

    def counter(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
        return Counter(name, doc, list(labels), registry=target)

    def gauge(name: str, doc: str, labels: Iterable[str] = ()) -> Any:
        return Gauge(name, doc, list(labels), registry=target)

    def histogram(name: str, doc: str, labels: Iterable[str], buckets: tuple[float, ...]) -> Any:
        return Histogram(name, doc, list(labels), registry=target, buckets=buckets)

    requests = counter(
        "agent_tool_group_requests_total",
        "Agent sessions started, by requested tool group",
        ["group"],
    )
    group_availability = gauge(
        "agent_tool_group_availability",
        "Configured tools in each tool group (live configuration)",
        ["group"],
    )
    filtered_tools = histogram(
        "agent_filtered_tools_count",
        "Tools offered after group and state filtering, at session start and after "
        "each state change",
        [],
        COUNT_BUCKETS,
    )
    transitions = counter(
        "agent_state_transitions_total",
        "State changes after successful tool calls, by tool",
        ["tool", "from_state", "to_state"],
    )
    state_duration = histogram(
        "agent_workflow_duration_seconds",
        "Time an agent session spent in a state before leaving it (or closing)",
        ["state"],
        STATE_SECONDS_BUCKETS,
    )
    state_availability = gauge(
        "agent_state_availability",
        "Configured tools offered in each state, before group filtering (live configuration)",
        ["state"],
    )
    access_denied = counter(
        "agent_group_access_denied_total",
        "Tool groups refused to agent requests by the permissions",
        ["group"],
    )
    invalid_transitions = counter(
        "agent_invalid_state_transition_total",
        "Calls refused because the tool is not offered now (reason: state, group or unknown)",
        ["tool", "reason"],
    )
    escalations = counter(
        "agent_privilege_escalation_attempts_total",
        "Requests beyond a user's permissions (groups, wildcard) and calls of tools "
        "outside the session's groups (tool)",
        ["reason"],
    )
    call_checks = counter(
        "toolbus_call_checks_total",
        "Calls the call policy forbade, and calls that waited for approval, by tool and "
        "outcome (forbidden, approved, denied, expired)",
        ["tool", "outcome"],
    )
    tool_calls = counter(
        "toolbus_tool_calls_total",
        "Tool calls made by agent sessions, by outcome",
        ["tool", "service", "outcome"],
    )
    tool_call_duration = histogram(
        "toolbus_tool_call_duration_seconds",
        "Duration of tool calls made by agent sessions, as the caller saw it",
        ["tool", "service"],
        CALL_SECONDS_BUCKETS,
    )
    tool_call_errors = counter(
        "toolbus_tool_call_errors_total",
        "Failed tool calls made by agent sessions, by error type",
        ["tool", "service", "error_type"],
    )
    loop_requests = counter(
        "toolbus_agent_requests_total",
        "Agent requests the agent loop finished, by outcome (answer, or the error type)",
        ["outcome"],
    )
    loop_iterations = histogram(
        "toolbus_agent_iterations",
        "Model turns the agent loop took per request",
        [],
        COUNT_BUCKETS,
    )
    # OpenTelemetry's GenAI client metrics, under the names OpenTelemetry gives them
    # in Prometheus (dots as underscores, the unit as a suffix).
    model_duration = histogram(
        "gen_ai_client_operation_duration_seconds",
        "GenAI operation duration: the agent loop's model turns (gen_ai.client.operation.duration)",
        [
            "gen_ai_operation_name",
            "gen_ai_provider_name",
            "gen_ai_request_model",
            "error_type",
        ],
        GEN_AI_SECONDS_BUCKETS,
    )
    model_tokens = histogram(
        "gen_ai_client_token_usage",
        "Tokens used per GenAI operation, input and output: the agent loop's model turns "
        "(gen_ai.client.token.usage)",
        [
            "gen_ai_operation_name",
            "gen_ai_provider_name",
            "gen_ai_request_model",
            "gen_ai_token_type",
        ],
        GEN_AI_TOKEN_BUCKETS,
    )
    call_retries = counter(
        "toolbus_call_retries_total",
        "Calls sent again under a retry policy, by service and the error that caused it",
        ["service", "error_type"],
    )
    dead_letters = counter(
        "toolbus_service_dead_letters_total",
        "Requests a service host moved to its queue's dead letters instead of serving, "
        "by reason (queued-too-long)",
        ["service", "reason"],
    )
    unpublished_answers = counter(
        "toolbus_service_unpublished_answers_total",
        "Answers the broker would not take: on a persistent queue the request is handed "
        "back to be answered again (handed-back), on a non-persistent one it is lost (lost)",
        ["service", "outcome"],
    )
    refused_records = counter(
        "toolbus_state_records_refused_total",
        "Records in a shared state store a door refused because they did not open with "
        "its seal keys (forged, altered, moved, or sealed with a key it lacks), by namespace",
        ["namespace"],
    )
    limit_refusals = counter(
        "toolbus_limit_refusals_total",
        "Tool calls and model turns refused by a rate limit or a spent budget, by the limit's "
        "name ([[limits]], [[budgets]]) and what was refused (tool-call, model-turn)",
        ["name", "refused"],
    )
    costs = counter(
        "toolbus_cost_total",
        "What tool calls and model turns cost, in the currency of [costs], by kind (tool, "
        "model) and the tool's or model's name",
        ["kind", "name"],
    )
    cache_lookups = counter(
        "toolbus_cache_lookups_total",
        "Calls of tools whose answers are cached, by tool and result: hit (a cached answer "
        "stood in, no call was made) or miss (the call was made)",
        ["tool", "result"],
    )
    return Instruments(
        requests=requests,
        group_availability=group_availability,
        filtered_tools=filtered_tools,
        transitions=transitions,
        state_duration=state_duration,
        state_availability=state_availability,
        access_denied=access_denied,
        invalid_transitions=invalid_transitions,
        escalations=escalations,
        call_checks=call_checks,
        tool_calls=tool_calls,
        tool_call_duration=tool_call_duration,
        tool_call_errors=tool_call_errors,
        loop_requests=loop_requests,
        loop_iterations=loop_iterations,
        model_duration=model_duration,
        model_tokens=model_tokens,
        call_retries=call_retries,
        dead_letters=dead_letters,
        unpublished_answers=unpublished_answers,
        refused_records=refused_records,
        limit_refusals=limit_refusals,
        costs=costs,
        cache_lookups=cache_lookups,
    )
