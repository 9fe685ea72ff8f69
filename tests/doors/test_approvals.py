"""Calls a person approves first, and call policies that see the arguments, at the front door.

On the in-memory bus with the tool-group spec's workflow tools served for real,
approvals kept in a real in-memory state store, and Cedar (``toolbus[policy]``)
deciding on the arguments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.steps import call_steps
from toolbus.domain.access.approvals import Approval
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import ConfigError
from toolbus.plugins import connect_state, load_policy_engine
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

LOCAL = {"users": {"carol": ["read-only", "knowledge"], "ops": ["*"]}, "fallback": []}


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


async def door_for(
    kit: ToolTestKit,
    audit: ListAuditSink,
    approvals: dict[str, Any],
    *,
    engine: Any = None,
) -> FrontDoor:
    state = await connect_state("memory://approvals-test")
    settings = {"permissions": LOCAL, "approvals": approvals}
    return FrontDoor.from_files(
        kit.tools(load_registry(workflow_snapshot())),
        local=None,
        settings=settings,
        audit=audit,
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps(settings, engine=engine, store=state),
    )


async def first_pending(book: ApprovalBook) -> Approval:
    """The first approval to wait, awaited through the book's change feed."""
    async for _ in book.changes():
        pending = await book.pending()
        if pending:
            return pending[0]
    raise AssertionError("the change feed ended")


async def call_decided(
    door: FrontDoor,
    approve: bool | None,
    *,
    tool: str = "knowledge-query",
    arguments: dict[str, Any] | None = None,
) -> tuple[Any, Approval | None]:
    """Carol calls knowledge-query while ops approves, denies (or, with None, nobody acts)."""
    assert door.book is not None
    seen: list[Approval] = []
    result: list[Any] = []

    async def decide() -> None:
        approval = await first_pending(door.book)  # type: ignore[arg-type]
        seen.append(approval)
        if approve is not None:
            await door.book.decide(approval.id, "ops", approve, "checked it", via="api-key")  # type: ignore[union-attr]

    async def call() -> None:
        async with door.open("carol", ["read-only"]) as session:
            result.append(await session.call(tool, arguments or {"question": "who?"}))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(decide)
            tasks.start_soon(call)
    return result[0], (seen[0] if seen else None)


async def test_an_approved_call_is_made_and_audited_with_its_approver(kit: ToolTestKit) -> None:
    audit = ListAuditSink()
    door = await door_for(kit, audit, {"approvers": ["ops"], "tools": ["knowledge-query"]})

    outcome, approval = await call_decided(door, True)

    assert outcome.ok
    assert approval is not None
    assert (approval.user, approval.tool, approval.approvers) == (
        "carol",
        "knowledge-query",
        ("ops",),
    )
    assert approval.arguments == {"question": "who?"}
    call = audit.records[-1].calls[0]
    assert call.approval is not None
    assert (call.approval.status, call.approval.decided_by) == ("approved", "ops")
    assert await door.book.pending() == []  # type: ignore[union-attr]


async def test_a_denied_call_is_not_made_and_the_model_reads_who_denied_it(
    kit: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    door = await door_for(kit, audit, {"approvers": ["ops"], "tools": ["knowledge-query"]})

    outcome, _ = await call_decided(door, False)

    assert not outcome.ok
    assert "ops" in str(outcome.observation) and "denied" in str(outcome.observation)
    call = audit.records[-1].calls[0]
    assert call.refusal == "approval"
    assert call.approval is not None
    assert (call.approval.status, call.approval.decided_by) == ("denied", "ops")


async def test_a_call_nobody_decides_expires_after_the_configured_timeout(
    kit: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    door = await door_for(
        kit, audit, {"approvers": ["ops"], "tools": ["knowledge-query"], "timeout": 0.3}
    )

    outcome, approval = await call_decided(door, None)

    assert not outcome.ok
    assert approval is not None and approval.expires_at - approval.created_at == pytest.approx(0.3)
    call = audit.records[-1].calls[0]
    assert call.approval is not None
    assert (call.approval.status, call.approval.decided_by) == ("expired", None)


async def test_someone_not_named_may_not_decide(kit: ToolTestKit) -> None:
    door = await door_for(
        kit, ListAuditSink(), {"approvers": ["ops"], "tools": ["knowledge-query"]}
    )
    assert door.book is not None
    errors: list[Exception] = []

    async def carol_tries_then_ops_denies() -> None:
        approval = await first_pending(door.book)  # type: ignore[arg-type]
        try:
            await door.book.decide(approval.id, "carol", True, via="api-key")  # type: ignore[union-attr]
        except Exception as exc:
            errors.append(exc)
        await door.book.decide(approval.id, "ops", False, via="api-key")  # type: ignore[union-attr]

    async def call() -> None:
        async with door.open("carol", ["read-only"]) as session:
            assert not (await session.call("knowledge-query", {"question": "q"})).ok

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(carol_tries_then_ops_denies)
            tasks.start_soon(call)
    assert [type(e).__name__ for e in errors] == ["NotAnApprover"]


async def test_a_team_nobody_configured_stops_the_start(kit: ToolTestKit) -> None:
    snapshot = workflow_snapshot()
    snapshot["tool"]["knowledge-query"]["approval"] = {"approvers": "finance"}
    with pytest.raises(ConfigError, match=r"finance.*\[approvals.teams\]"):
        FrontDoor.from_files(
            kit.tools(load_registry(snapshot)),
            local=None,
            settings={"permissions": LOCAL},
            audit=ListAuditSink(),
            metrics=ToolbusMetrics.disabled(),
        )


# ------------------------------------------------------------------ policies on arguments

TENANT_POLICY = """
permit(principal, action == Action::"call", resource);

@reason("callers ask only about their own tenant")
forbid(principal, action, resource)
when { context.arguments has question }
unless { principal has tenant && context.arguments.question == principal.tenant };

@approval
permit(principal, action, resource)
when { context.arguments has prompt && context.arguments.prompt like "*delete*" };
"""


def cedar(tmp_path: Path, text: str, users: dict[str, Any]) -> Any:
    policy = tmp_path / "calls.cedar"
    policy.write_text(text)
    return load_policy_engine("cedar", [policy], users, {"reload": False})


async def test_the_policy_decides_on_the_arguments(kit: ToolTestKit, tmp_path: Path) -> None:
    audit = ListAuditSink()
    engine = cedar(tmp_path, TENANT_POLICY, {"carol": {"tenant": "acme"}})
    door = await door_for(kit, audit, {"approvers": ["ops"]}, engine=engine)
    try:
        # each in a session of its own: knowledge-query moves the session on to "analysis"
        async with door.open("carol", ["read-only"]) as session:
            own = await session.call("knowledge-query", {"question": "acme"})
        async with door.open("carol", ["read-only"]) as session:
            other = await session.call("knowledge-query", {"question": "globex"})
        async with door.open("carol", ["read-only"]) as session:
            plain = await session.call("text-completion", {"prompt": "a poem"})
        assert own.ok and plain.ok
        assert not other.ok
        assert "callers ask only about their own tenant" in str(other.observation)
        assert [c.refusal for r in audit.records for c in r.calls] == [None, "policy", None]

        outcome, approval = await call_decided(
            door, True, tool="text-completion", arguments={"prompt": "delete it all"}
        )
        assert outcome.ok
        assert approval is not None and approval.approvers == ("ops",)
    finally:
        door.close()


REHEARSAL_POLICY = """
permit(principal, action == Action::"call", resource);

@reason("rehearse first")
forbid(principal, action, resource == Tool::"rehearse")
unless { context.arguments has dry_run && context.arguments.dry_run };

@reason("every step is rehearsed")
forbid(principal, action, resource == Tool::"rehearse")
when { context.arguments has steps && context.arguments.steps.contains(false) };
"""


@pytest.mark.parametrize(
    ("allowed", "same_in_python"),
    [
        ({"dry_run": True}, {"dry_run": 1}),
        ({"dry_run": True}, {"dry_run": 1.0}),
        ({"dry_run": True, "steps": [True]}, {"dry_run": True, "steps": [1]}),
    ],
    ids=["true then 1", "true then 1.0", "true then 1 in a list"],
)
async def test_a_decision_is_remembered_for_values_of_the_same_json_type_only(
    kit: ToolTestKit, tmp_path: Path, allowed: dict[str, Any], same_in_python: dict[str, Any]
) -> None:
    audit = ListAuditSink()
    rehearse = {
        "type": "tool-service",
        "name": "rehearse",
        "description": "Rehearse the workflow",
        "service": "workflow-service",
        "group": ["read-only"],
        "arguments": [
            {"name": "dry_run", "type": "boolean", "description": "Only pretend"},
            {
                "name": "steps",
                "type": "array",
                "items": {"type": "boolean"},
                "description": "Which steps are rehearsed",
                "required": False,
            },
        ],
    }
    door = FrontDoor.from_files(
        kit.tools(load_registry(workflow_snapshot(extra_tools={"rehearse": rehearse}))),
        local=None,
        settings={"permissions": LOCAL},
        audit=audit,
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps(None, engine=cedar(tmp_path, REHEARSAL_POLICY, {})),
    )
    try:
        async with door.open("carol", ["read-only"]) as session:
            first = await session.call("rehearse", allowed)
            again = await session.call("rehearse", same_in_python)
    finally:
        door.close()

    assert allowed == same_in_python  # Python cannot tell them apart; JSON and Cedar can
    assert first.ok, first.observation
    assert not again.ok and again.refusal == "policy", again
    assert "do not have the types its tool declares" in again.observation
    [record] = audit.records
    assert [(c.status, c.refusal) for c in record.calls] == [("ok", None), ("refused", "policy")]


@pytest.mark.parametrize(
    "condition",
    [
        "context.arguments.amount > 10",
        # behind a `has` guard Cedar's own check sees nothing wrong
        "context.arguments has amount && context.arguments.amount > 10",
    ],
)
async def test_a_policy_that_names_an_argument_no_tool_has_stops_the_start(
    kit: ToolTestKit, tmp_path: Path, condition: str
) -> None:
    engine = cedar(tmp_path, f"forbid(principal, action, resource) when {{ {condition} }};", {})
    with pytest.raises(ConfigError, match=r"calls\.cedar") as raised:
        FrontDoor.from_files(
            kit.tools(load_registry(workflow_snapshot())),
            local=None,
            settings={"permissions": LOCAL},
            audit=ListAuditSink(),
            metrics=ToolbusMetrics.disabled(),
            steps=call_steps(None, engine=engine),
        )
    assert "amount" in str(raised.value)


async def test_changed_policy_files_are_taken_between_calls_and_bad_ones_are_not(
    kit: ToolTestKit, tmp_path: Path
) -> None:
    policy = tmp_path / "calls.cedar"
    policy.write_text(TENANT_POLICY)
    engine = load_policy_engine("cedar", [policy], {"carol": {"tenant": "acme"}}, {})
    door = await door_for(kit, ListAuditSink(), {"approvers": ["ops"]}, engine=engine)

    async def asks(question: str) -> bool:
        async with door.open("carol", ["read-only"]) as session:
            return (await session.call("knowledge-query", {"question": question})).ok

    outcomes: list[bool] = []

    async def calls_meanwhile(done: anyio.Event) -> None:
        while not done.is_set():
            outcomes.append(await asks("acme"))

    try:
        assert not await asks("globex")
        done = anyio.Event()
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(calls_meanwhile, done)
            # As an editor saves: a new file renamed over the old one.
            fresh = tmp_path / "calls.cedar.new"
            fresh.write_text('permit(principal, action == Action::"call", resource);\n')
            fresh.replace(policy)
            assert await anyio.to_thread.run_sync(engine.wait_for, 1, 20.0)
            done.set()
        assert await asks("globex")  # the new policies are in force
        assert outcomes and all(outcomes)  # no call in flight was dropped or refused

        policy.write_text("permit(principal, action, resource) when { nonsense };\n")
        assert engine.reload()  # what was wrong: not taken
        assert await asks("globex")  # the policies in force stay
    finally:
        door.close()
