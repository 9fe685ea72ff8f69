"""Metrics under the tool-group spec's names, read back from a private CollectorRegistry."""

from __future__ import annotations

import sys
import urllib.request

import pytest
from prometheus_client import REGISTRY, CollectorRegistry

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics, default_metrics
from toolbus.application.calls.metrics_server import MetricsUnavailable, start_metrics_server
from toolbus.domain.config.loading import load_registry
from toolbus.testing.kit import ToolTestKit

from .support import (
    BROKEN_DATASET,
    SERVICES,
    WORKFLOW_GROUPS,
    FakeClock,
    open_session,
    workflow_registry,
    workflow_snapshot,
)

SPEC_NAMES = [
    "agent_tool_group_requests",
    "agent_tool_group_availability",
    "agent_filtered_tools_count",
    "agent_state_transitions",
    "agent_workflow_duration_seconds",
    "agent_state_availability",
    "agent_group_access_denied",
    "agent_invalid_state_transition",
    "agent_privilege_escalation_attempts",
]


def value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


def test_every_metric_of_the_spec_is_registered() -> None:
    prometheus = CollectorRegistry()
    ToolbusMetrics(prometheus)
    names = {family.name for family in prometheus.collect()}
    assert set(SPEC_NAMES) <= names  # counters are listed without their _total
    assert {"toolbus_tool_calls", "toolbus_service_calls"} <= names


@pytest.mark.anyio
async def test_a_workflow_session_moves_the_agent_metrics(toolbus: ToolTestKit) -> None:
    await toolbus.serve(*SERVICES)
    prometheus = CollectorRegistry()
    clock = FakeClock()
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        metrics=ToolbusMetrics(prometheus),
        clock=clock,
        user="alice",
        groups=WORKFLOW_GROUPS,
    )
    async with session:
        clock.advance(2)
        await session.call("knowledge-query", {"question": "q"})
        clock.advance(3)
        await session.call("complex-analysis", {"dataset": BROKEN_DATASET})
        await session.call("complex-analysis", {"dataset": "sales"})
        clock.advance(1)

    for group in WORKFLOW_GROUPS:
        assert value(prometheus, "agent_tool_group_requests_total", group=group) == 1
    assert value(prometheus, "agent_tool_group_requests_total", group="write") == 0

    # Offered counts: 2 at the start, 4 in "analysis", 2 in "results".
    assert value(prometheus, "agent_filtered_tools_count_count") == 3
    assert value(prometheus, "agent_filtered_tools_count_sum") == 8

    transitions = "agent_state_transitions_total"
    assert (
        value(
            prometheus,
            transitions,
            tool="knowledge-query",
            from_state="undefined",
            to_state="analysis",
        )
        == 1
    )
    assert (
        value(
            prometheus,
            transitions,
            tool="complex-analysis",
            from_state="analysis",
            to_state="results",
        )
        == 1
    )

    durations = "agent_workflow_duration_seconds"
    assert value(prometheus, f"{durations}_sum", state="undefined") == 2
    assert value(prometheus, f"{durations}_sum", state="analysis") == 3
    assert value(prometheus, f"{durations}_sum", state="results") == 1
    assert value(prometheus, f"{durations}_count", state="results") == 1

    calls = "toolbus_tool_calls_total"
    assert (
        value(prometheus, calls, tool="knowledge-query", service="knowledge-service", outcome="ok")
        == 1
    )
    assert (
        value(prometheus, calls, tool="complex-analysis", service="analysis-service", outcome="ok")
        == 1
    )
    assert (
        value(
            prometheus, calls, tool="complex-analysis", service="analysis-service", outcome="error"
        )
        == 1
    )
    assert (
        value(
            prometheus,
            "toolbus_tool_call_errors_total",
            tool="complex-analysis",
            service="analysis-service",
            error_type="tool-service-error",
        )
        == 1
    )
    assert (
        value(
            prometheus,
            "toolbus_tool_call_duration_seconds_count",
            tool="complex-analysis",
            service="analysis-service",
        )
        == 2
    )


def test_availability_gauges_follow_the_live_configuration() -> None:
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    metrics.observe_registry(workflow_registry())

    group = "agent_tool_group_availability"
    assert value(prometheus, group, group="knowledge") == 2
    assert value(prometheus, group, group="admin") == 2
    assert value(prometheus, group, group="text") == 1
    state = "agent_state_availability"
    assert value(prometheus, state, state="undefined") == 2
    assert value(prometheus, state, state="analysis") == 4
    assert value(prometheus, state, state="results") == 2
    assert value(prometheus, state, state="research") == 2
    assert value(prometheus, state, state="modification") == 2

    # A new snapshot replaces the gauges; groups that are gone disappear.
    reloaded = workflow_snapshot()
    reloaded["tool"]["text-completion"]["group"] = ["writing"]
    metrics.observe_registry(load_registry(reloaded))
    assert prometheus.get_sample_value(group, {"group": "text"}) is None
    assert value(prometheus, group, group="writing") == 1


def test_the_service_side_records_calls_by_service() -> None:
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    metrics.service_call("joke-service", 0.01)
    metrics.service_call("joke-service", 0.02, "bad-request")
    calls = "toolbus_service_calls_total"
    assert value(prometheus, calls, service="joke-service", outcome="ok") == 1
    assert value(prometheus, calls, service="joke-service", outcome="error") == 1
    assert (
        value(
            prometheus,
            "toolbus_service_call_errors_total",
            service="joke-service",
            error_type="bad-request",
        )
        == 1
    )
    assert value(
        prometheus, "toolbus_service_call_duration_seconds_sum", service="joke-service"
    ) == pytest.approx(0.03)


def test_label_values_outside_the_configuration_are_counted_as_other() -> None:
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    snapshot = workflow_snapshot()
    metrics.observe_registry(load_registry(snapshot), extra_groups=["granted-only"])
    metrics.session_started(["read-only", "granted-only", "invented-1", "invented-2"], offered=0)
    metrics.call_refused("no-such-tool-" + "x" * 1000, "unknown")
    metrics.state_changed("knowledge-query", "undefined", "x" * 100_000, 1.0, 2)
    requests = "agent_tool_group_requests_total"
    assert value(prometheus, requests, group="read-only") == 1
    assert value(prometheus, requests, group="granted-only") == 1
    assert value(prometheus, requests, group="other") == 2
    invalid = "agent_invalid_state_transition_total"
    assert value(prometheus, invalid, tool="other", reason="unknown") == 1
    transitions = "agent_state_transitions_total"
    assert (
        value(
            prometheus,
            transitions,
            tool="knowledge-query",
            from_state="undefined",
            to_state="other",
        )
        == 1
    )
    exposed = {sample.labels.get("to_state") for f in prometheus.collect() for sample in f.samples}
    assert "x" * 100_000 not in exposed


def test_disabled_metrics_record_nothing() -> None:
    default_metrics()  # toolbus's metrics exist in the process-wide registry
    before = toolbus_samples(REGISTRY)
    metrics = ToolbusMetrics.disabled()
    assert not metrics.enabled and metrics.registry is None
    metrics.session_started(["a"], offered=1)
    metrics.access_denied_for(["*"])
    metrics.call_refused("t", "group")
    metrics.state_changed("t", "a", "b", 1.0, 2)
    metrics.session_closed("b", 1.0)
    metrics.tool_call("t", "s", 0.1, "x")
    metrics.service_call("s", 0.1, None)
    metrics.observe_registry(workflow_registry())
    assert metrics.registry is None
    assert toolbus_samples(REGISTRY) == before


def toolbus_samples(prometheus: CollectorRegistry) -> list[tuple[str, str, float]]:
    """Every agent_* and toolbus_* sample in ``prometheus``: name, labels, value."""
    return sorted(
        (sample.name, repr(sorted(sample.labels.items())), sample.value)
        for family in prometheus.collect()
        for sample in family.samples
        if sample.name.startswith(("agent_", "toolbus_"))
    )


def test_without_prometheus_client_metrics_are_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # makes the import fail
    metrics = ToolbusMetrics()
    assert not metrics.enabled
    metrics.session_started(["a"], offered=1)
    with pytest.raises(MetricsUnavailable, match=r"pip install 'toolbus\[metrics\]'"):
        start_metrics_server(0)


def test_the_metrics_endpoint_serves_the_registry() -> None:
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    metrics.observe_registry(load_registry(workflow_snapshot()), extra_groups=["admin"])
    metrics.access_denied_for(["admin"])
    server = start_metrics_server(0, registry=prometheus)
    try:
        assert server.host == "127.0.0.1" and server.port > 0
        url = f"http://127.0.0.1:{server.port}/metrics"
        direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxies
        with direct.open(url, timeout=5) as response:
            body = response.read().decode()
    finally:
        server.close()
    assert 'agent_group_access_denied_total{group="admin"} 1.0' in body
    assert 'agent_privilege_escalation_attempts_total{reason="groups"} 1.0' in body


def test_a_host_records_through_a_recorder_bound_to_its_service() -> None:
    prometheus = CollectorRegistry()
    recorder = ToolbusMetrics(prometheus).for_service("calculator")
    recorder.record(0.5)
    recorder.record(0.25, "bad-request")
    recorder.record(0.25, "bad-request")
    assert value(prometheus, "toolbus_service_calls_total", service="calculator", outcome="ok") == 1
    assert (
        value(prometheus, "toolbus_service_calls_total", service="calculator", outcome="error") == 2
    )
    assert (
        value(
            prometheus,
            "toolbus_service_call_errors_total",
            service="calculator",
            error_type="bad-request",
        )
        == 2
    )
    assert (
        value(prometheus, "toolbus_service_call_duration_seconds_sum", service="calculator") == 1.0
    )
    ToolbusMetrics.disabled().for_service("calculator").record(0.1, "x")


def test_hosts_of_one_service_add_up_into_cumulative_buckets() -> None:
    prometheus = CollectorRegistry()
    metrics = ToolbusMetrics(prometheus)
    first, second = metrics.for_service("calculator"), metrics.for_service("calculator")
    first.record(0.001)  # on a bound: counted in that bucket (le)
    second.record(0.003)
    second.record(100.0, "bad-request")  # beyond the last bound: +Inf only
    bucket = "toolbus_service_call_duration_seconds_bucket"
    assert value(prometheus, bucket, service="calculator", le="0.001") == 1
    assert value(prometheus, bucket, service="calculator", le="0.005") == 2
    assert value(prometheus, bucket, service="calculator", le="60.0") == 2
    assert value(prometheus, bucket, service="calculator", le="+Inf") == 3
    assert (
        value(prometheus, "toolbus_service_call_duration_seconds_count", service="calculator") == 3
    )
    assert value(prometheus, "toolbus_service_calls_total", service="calculator", outcome="ok") == 2
    assert (
        value(prometheus, "toolbus_service_calls_total", service="calculator", outcome="error") == 1
    )
