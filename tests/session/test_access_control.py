"""Access control in agent sessions: permissions, escalation, refused calls, audit, metrics."""

from __future__ import annotations

import anyio
import pytest
from prometheus_client import CollectorRegistry

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.errors import AccessDenied
from toolbus.testing.kit import ToolTestKit

from .support import SERVICES, FakeClock, offered, open_session, workflow_registry

pytestmark = pytest.mark.anyio

PERMISSIONS = Permissions(
    {
        "alice": ("read-only", "knowledge"),
        "bob": ("write", "knowledge", "compute", "admin"),
        "ops": ("*",),
    }
)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def test_two_users_run_concurrently_and_each_sees_only_their_tools(
    toolbus: ToolTestKit,
) -> None:
    await toolbus.serve(*SERVICES)
    registry = workflow_registry()
    audit = ListAuditSink()
    alice = open_session(
        toolbus,
        registry,
        audit=audit,
        permissions=PERMISSIONS,
        user="alice",
        groups=["read-only", "knowledge"],
    )
    bob = open_session(
        toolbus,
        registry,
        audit=audit,
        permissions=PERMISSIONS,
        user="bob",
        groups=["write", "admin"],
        state="analysis",
    )
    assert offered(alice) == ["knowledge-query", "text-completion"]
    assert offered(bob) == ["graph-update", "reset-workflow"]
    observations: dict[str, list[str]] = {"alice": [], "bob": []}
    # Both sessions wait for each other between steps, so their calls interleave.
    alice_called, bob_called = anyio.Event(), anyio.Event()

    async def run_alice() -> None:
        async with alice:
            outcome = await alice.call("knowledge-query", {"question": "Company X?"})
            observations["alice"].append(outcome.observation)
            alice_called.set()
            await bob_called.wait()
            assert alice.state == "analysis"
            assert offered(alice) == ["graph-update", "text-completion"]
            outcome = await alice.call("text-completion", {"prompt": "a summary"})
            observations["alice"].append(outcome.observation)

    async def run_bob() -> None:
        async with bob:
            await alice_called.wait()
            outcome = await bob.call("graph-update", {"entity": "Acme", "operation": "add"})
            observations["bob"].append(outcome.observation)
            assert bob.state == "analysis"  # alice's transition is not bob's
            bob_called.set()
            outcome = await bob.call("reset-workflow", {})
            observations["bob"].append(outcome.observation)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_alice)
        tasks.start_soon(run_bob)

    # Each service saw the user whose session called it.
    assert all(text.startswith("[alice]") for text in observations["alice"])
    assert all(text.startswith("[bob]") for text in observations["bob"])
    assert alice.state == "undefined" and bob.state == "undefined"
    assert [(t.tool, t.from_state, t.to_state) for t in alice.transitions] == [
        ("knowledge-query", "undefined", "analysis"),
        ("text-completion", "analysis", "undefined"),
    ]
    assert [(t.tool, t.from_state, t.to_state) for t in bob.transitions] == [
        ("reset-workflow", "analysis", "undefined"),
    ]

    [alice_record] = audit.for_user("alice")
    [bob_record] = audit.for_user("bob")
    assert alice_record.request_id != bob_record.request_id
    assert alice_record.granted_groups == ["read-only", "knowledge"]
    assert alice_record.allowed_groups == ["read-only", "knowledge"]
    assert alice_record.available_tools == ["knowledge-query", "text-completion"]
    assert alice_record.filtered_by_group == ["complex-analysis", "reset-workflow"]
    assert alice_record.filtered_by_state == ["graph-update"]
    assert bob_record.initial_state == "analysis"
    assert bob_record.available_tools == ["graph-update", "reset-workflow"]
    assert bob_record.filtered_by_group == [
        "knowledge-query",
        "text-completion",
        "complex-analysis",
    ]
    assert [c.tool for c in bob_record.calls] == ["graph-update", "reset-workflow"]
    assert {alice_record.outcome, bob_record.outcome} == {"completed"}


@pytest.mark.parametrize(
    ("groups", "denied", "reason"),
    [
        (["read-only", "admin"], ["admin"], "groups"),
        (["*"], ["*"], "wildcard"),
        (["*", "write"], ["*", "write"], "wildcard"),
    ],
)
async def test_escalation_is_refused_before_anything_runs_counted_and_audited(
    toolbus: ToolTestKit, groups: list[str], denied: list[str], reason: str
) -> None:
    [*hosts] = await toolbus.serve(*SERVICES)
    prometheus = CollectorRegistry()
    audit = ListAuditSink()
    with pytest.raises(AccessDenied) as caught:
        open_session(
            toolbus,
            workflow_registry(),
            audit=audit,
            metrics=ToolbusMetrics(prometheus),
            permissions=PERMISSIONS,
            user="alice",
            groups=groups,
            request_id="req-evil",
        )
    assert caught.value.user == "alice"
    assert list(caught.value.denied) == denied
    assert sum(host.handled for host in hosts) == 0

    for group in denied:
        assert sample(prometheus, "agent_group_access_denied_total", group=group) == 1
    assert sample(prometheus, "agent_privilege_escalation_attempts_total", reason=reason) == 1
    assert sample(prometheus, "agent_tool_group_requests_total", group="read-only") == 0

    [record] = audit.records
    assert record.request_id == "req-evil" and record.user == "alice"
    assert record.outcome == "denied"
    assert record.requested_groups == groups
    assert record.granted_groups == [] and record.available_tools == []
    assert record.allowed_groups == ["read-only", "knowledge"]
    assert record.access_denied is not None
    assert record.access_denied.denied_groups == denied
    assert record.access_denied.wildcard is (reason == "wildcard")


async def test_star_is_granted_only_when_allowed_explicitly(toolbus: ToolTestKit) -> None:
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        permissions=PERMISSIONS,
        user="ops",
        groups=["*"],
        state="analysis",
    )
    assert offered(session) == [
        "graph-update",
        "text-completion",
        "complex-analysis",
        "reset-workflow",
    ]
    # bob may use every group there is, one by one, but was never given "*".
    with pytest.raises(AccessDenied, match="may not request every tool group with '\\*'"):
        open_session(
            toolbus,
            workflow_registry(),
            audit=ListAuditSink(),
            permissions=PERMISSIONS,
            user="bob",
            groups=["*"],
        )


async def test_unknown_users_get_the_fallback_which_is_nothing_by_default(
    toolbus: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    with pytest.raises(AccessDenied, match="'mallory' is not listed in the permissions"):
        # No groups means ["default"], which the (empty) fallback does not include.
        open_session(
            toolbus, workflow_registry(), audit=audit, permissions=PERMISSIONS, user="mallory"
        )
    assert audit.records[-1].allowed_groups == []
    empty = open_session(
        toolbus,
        workflow_registry(),
        audit=audit,
        permissions=PERMISSIONS,
        user="mallory",
        groups=[],
    )
    assert offered(empty) == []

    generous = Permissions({"alice": ("admin",)}, fallback=("read-only",))
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=audit,
        permissions=generous,
        user="mallory",
        groups=["read-only"],
    )
    assert offered(session) == ["knowledge-query", "text-completion"]


async def test_permissions_come_from_the_snapshot_when_not_given(toolbus: ToolTestKit) -> None:
    registry = workflow_registry({"users": {"alice": ["admin"]}})
    session = AgentSession(
        toolbus.tools(registry),
        user="alice",
        groups=["admin"],
        state="results",
        audit=ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
    )
    assert offered(session) == ["reset-workflow"]
    with pytest.raises(AccessDenied):
        AgentSession(
            toolbus.tools(registry),
            user="alice",
            groups=["knowledge"],
            audit=ListAuditSink(),
            metrics=ToolbusMetrics.disabled(),
        )


async def test_without_a_permissions_section_access_control_is_off(toolbus: ToolTestKit) -> None:
    audit = ListAuditSink()
    session = AgentSession(
        toolbus.tools(workflow_registry()),
        user="anyone",
        groups=["*"],
        audit=audit,
        metrics=ToolbusMetrics.disabled(),
    )
    assert len(offered(session)) == 2
    await session.close()
    assert audit.records[0].allowed_groups == ["*"]


async def test_calls_outside_the_offered_set_are_refused_counted_and_audited(
    toolbus: ToolTestKit,
) -> None:
    hosts = await toolbus.serve(*SERVICES)
    prometheus = CollectorRegistry()
    audit = ListAuditSink()
    clock = FakeClock()
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=audit,
        metrics=ToolbusMetrics(prometheus),
        permissions=PERMISSIONS,
        clock=clock,
        user="alice",
        groups=["read-only", "knowledge"],
    )
    async with session:
        # In alice's groups, but not offered in state "undefined".
        by_state = await session.call("graph-update", {"entity": "x", "operation": "delete"}, "c1")
        # Exists, but only in groups alice did not request.
        by_group = await session.call("complex-analysis", {"dataset": "d"}, "c2")
        # Does not exist at all.
        unknown = await session.call("drop_all_tables", {}, "c3")

    assert sum(host.handled for host in hosts) == 0
    assert session.state == "undefined"
    assert [o.status for o in (by_state, by_group, unknown)] == ["refused"] * 3
    # The outcome says "unknown" for both; the audit record keeps "group" (below).
    assert [o.refusal for o in (by_state, by_group, unknown)] == ["state", "unknown", "unknown"]
    assert by_state.observation == (
        "The tool 'graph-update' cannot be used in the current state ('undefined'). "
        "No call was made. Tools you can use now: knowledge-query, text-completion."
    )
    # A tool outside the groups reads exactly like one that does not exist.
    assert by_group.observation == (
        "There is no tool named 'complex-analysis' available to you. "
        "No call was made. Tools you can use now: knowledge-query, text-completion."
    )
    assert by_group.tool is None and unknown.tool is None
    assert by_group.as_openai_message()["tool_call_id"] == "c2"
    assert by_group.as_anthropic_result()["is_error"] is True
    assert by_group.as_mcp_result()["isError"] is True

    invalid = "agent_invalid_state_transition_total"
    assert sample(prometheus, invalid, tool="graph-update", reason="state") == 1
    assert sample(prometheus, invalid, tool="complex-analysis", reason="group") == 1
    assert sample(prometheus, invalid, tool="other", reason="unknown") == 1
    assert sample(prometheus, "agent_privilege_escalation_attempts_total", reason="tool") == 1
    assert (
        sample(
            prometheus,
            "toolbus_tool_calls_total",
            tool="graph-update",
            service="graph-service",
            outcome="ok",
        )
        == 0
    )

    calls = audit.records[0].calls
    assert [(c.tool, c.status, c.refusal, c.tool_call_id) for c in calls] == [
        ("graph-update", "refused", "state", "c1"),
        ("complex-analysis", "refused", "group", "c2"),
        ("drop_all_tables", "refused", "unknown", "c3"),
    ]
