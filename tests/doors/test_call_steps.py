"""The steps every call passes at a front door, each alone, and the runner that orders them.

The call policy is Cedar (``toolbus[policy]``) on real policy files; approvals
wait in a real in-memory state store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.session.support import workflow_snapshot
from toolbus.application.agent.asking import ApprovalReply, replying
from toolbus.application.agent.audit import ApprovalNote, Refusal
from toolbus.application.agent.steps import (
    PERMITTED,
    CallPermitted,
    CallStep,
    CallSteps,
    CallStopped,
    CheckedCall,
)
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.application.doors.steps.policy import PolicyStep
from toolbus.domain.access.approvals import parse_approval_settings
from toolbus.domain.access.policy import ApproveFirst
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import Problem
from toolbus.plugins import connect_state, load_policy_engine
from toolbus.ports import PolicyEngine

pytestmark = pytest.mark.anyio

REGISTRY = load_registry(workflow_snapshot())


def checked(
    tool: str = "knowledge-query",
    arguments: dict[str, Any] | None = None,
    *,
    registry: Registry = REGISTRY,
    wait: bool = True,
    permitted: CallPermitted = PERMITTED,
) -> CheckedCall:
    return CheckedCall(
        user="carol",
        groups=("read-only", "knowledge"),
        state="undefined",
        request_id="request-1",
        tool_call_id="call-1",
        tool=registry.tool(tool),
        arguments=arguments if arguments is not None else {"question": "who?"},
        registry=registry,
        wait=wait,
        permitted=permitted,
    )


# ------------------------------------------------------------------ the runner


class Recorded(CallStep):
    """A step that answers as it is told and writes down what it saw."""

    def __init__(
        self,
        name: Refusal,
        answer: CallPermitted | CallStopped,
        seen: list[tuple[str, CheckedCall]],
        *,
        applies: bool = True,
        problems: tuple[str, ...] = (),
    ) -> None:
        self.name = name
        self.answer = answer
        self.seen = seen
        self._applies = applies
        self._problems = problems
        self.closed = False

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped:
        self.seen.append((self.name, call))
        return self.answer

    def applies(self, registry: Registry) -> bool:
        return self._applies

    def problems(self, registry: Registry) -> list[Problem]:
        return [Problem(self.name, "", text) for text in self._problems]

    def close(self) -> None:
        self.closed = True


NOTE = ApprovalNote(id="a1", status="approved", decided_by="ops")
ASKED = ApproveFirst(approvers=None, reason="looks risky", policy="p1")


async def test_the_steps_run_in_order_and_each_sees_what_the_ones_before_decided() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    steps = CallSteps(
        [
            Recorded("policy", CallPermitted(approve_first=ASKED), seen),
            Recorded("approval", CallPermitted(approval=NOTE), seen),
            Recorded("hook", PERMITTED, seen),
        ]
    )

    verdict = await steps.check(checked())

    assert [name for name, _ in seen] == ["policy", "approval", "hook"]
    assert [call.permitted for _, call in seen] == [
        PERMITTED,
        CallPermitted(approve_first=ASKED),
        CallPermitted(approval=NOTE, approve_first=ASKED),
    ]
    assert verdict == CallPermitted(approval=NOTE, approve_first=ASKED)


async def test_the_first_step_that_stops_a_call_ends_the_run() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    stop = CallStopped("policy", "not this one", policy="p2", retry_after=3.0)
    steps = CallSteps(
        [
            Recorded("policy", stop, seen),
            Recorded("approval", CallPermitted(approval=NOTE), seen),
        ]
    )

    verdict = await steps.check(checked())

    assert verdict is stop
    assert [name for name, _ in seen] == ["policy"]


async def test_a_call_stopped_after_it_was_approved_keeps_its_approval_for_the_record() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    steps = CallSteps(
        [
            Recorded("approval", CallPermitted(approval=NOTE), seen),
            Recorded("hook", CallStopped("hook", "no more today", retry_after=60.0), seen),
        ]
    )

    verdict = await steps.check(checked())

    assert verdict == CallStopped("hook", "no more today", approval=NOTE, retry_after=60.0)


async def test_plain_yeses_allocate_nothing() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    call = checked()
    steps = CallSteps([Recorded("policy", PERMITTED, seen), Recorded("approval", PERMITTED, seen)])

    assert await steps.check(call) is PERMITTED
    assert all(each is call for _, each in seen)  # the same call object, not copies


def test_only_the_steps_that_apply_run_and_none_costs_nothing() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    policy = Recorded("policy", PERMITTED, seen)
    idle = Recorded("approval", PERMITTED, seen, applies=False)

    assert CallSteps([]).on(REGISTRY) is None
    assert CallSteps([idle]).on(REGISTRY) is None
    both = CallSteps([policy, idle])
    applying = both.on(REGISTRY)
    assert applying is not None and applying.steps == (policy,)
    every = CallSteps([policy])
    assert every.on(REGISTRY) is every


def test_problems_are_gathered_from_every_step_and_close_reaches_each() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    first = Recorded("policy", PERMITTED, seen, problems=("one",))
    second = Recorded("approval", PERMITTED, seen, problems=("two", "three"))
    steps = CallSteps([first, second])

    assert [problem.message for problem in steps.problems(REGISTRY)] == ["one", "two", "three"]
    steps.close()
    assert first.closed and second.closed


def test_a_step_named_twice_is_refused() -> None:
    seen: list[tuple[str, CheckedCall]] = []
    with pytest.raises(ValueError, match="given twice: policy"):
        CallSteps([Recorded("policy", PERMITTED, seen), Recorded("policy", PERMITTED, seen)])


# ------------------------------------------------------------------ the call policy

POLICY = """
permit(principal, action == Action::"call", resource);

@id("tenants")
@reason("callers ask only about their own tenant")
forbid(principal, action, resource)
when { context.arguments has question }
unless { principal has tenant && context.arguments.question == principal.tenant };

@approval
@reason("deleting needs a second pair of eyes")
permit(principal, action, resource)
when { context.arguments has prompt && context.arguments.prompt like "*delete*" };
"""


def cedar(tmp_path: Path, text: str = POLICY) -> PolicyEngine:
    path = tmp_path / "calls.cedar"
    path.write_text(text)
    engine: PolicyEngine = load_policy_engine(
        "cedar", [path], {"carol": {"tenant": "acme"}}, {"reload": False}
    )
    return engine


async def test_the_policy_step_permits_forbids_or_asks_for_approval(tmp_path: Path) -> None:
    step = PolicyStep(cedar(tmp_path))

    assert await step.check(checked(arguments={"question": "acme"})) is PERMITTED
    forbidden = await step.check(checked(arguments={"question": "globex"}))
    asked = await step.check(checked("text-completion", {"prompt": "delete it all"}))

    assert isinstance(forbidden, CallStopped)
    assert (forbidden.step, forbidden.policy) == ("policy", "tenants")
    assert "callers ask only about their own tenant" in forbidden.observation
    assert forbidden.retry_after is None  # asking again does not help
    assert isinstance(asked, CallPermitted) and asked.approve_first is not None
    assert asked.approve_first.reason == "deleting needs a second pair of eyes"
    assert asked.approval is None  # nobody approved anything yet
    step.close()


def test_the_policy_step_reports_what_does_not_fit_the_configuration(tmp_path: Path) -> None:
    step = PolicyStep(
        cedar(tmp_path, "forbid(principal, action, resource) when { context.arguments.x > 1 };")
    )
    problems = step.problems(REGISTRY)
    assert problems and "calls.cedar" in problems[0].where
    step.close()


# ------------------------------------------------------------------ approvals


async def approvals(
    table: dict[str, Any], *, policy: PolicyEngine | None = None, store: bool = True
) -> ApprovalStep:
    settings = parse_approval_settings(table)
    book = None
    if store:
        state = await connect_state(f"memory://call-steps-{id(table)}")
        book = ApprovalBook(state, max_pending=settings.max_pending)
    return ApprovalStep(settings, book, policy=policy)


async def approved_by_ops(
    step: CallStep | CallSteps, book: ApprovalBook | None, call: CheckedCall
) -> CallPermitted | CallStopped:
    """Run ``call`` through ``step`` while ops approves it in ``book``."""
    assert book is not None
    verdict: list[CallPermitted | CallStopped] = []

    async def approve() -> None:
        async for _ in book.changes():
            pending = await book.pending()
            if pending:
                await book.decide(pending[0].id, "ops", True, "fine", via="api-key")
                return

    async def run() -> None:
        verdict.append(await step.check(call))

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(approve)
            tasks.start_soon(run)
    return verdict[0]


async def test_a_call_nobody_asks_approval_for_passes_the_approvals_step() -> None:
    step = await approvals({"approvers": ["ops"], "tools": ["graph-update"]})

    assert await step.check(checked()) is PERMITTED


async def test_what_the_policy_asked_for_makes_the_approvals_step_wait_for_a_person() -> None:
    step = await approvals({"approvers": ["ops"]})
    call = checked(permitted=CallPermitted(approve_first=ASKED))

    verdict = await approved_by_ops(step, step.book, call)

    assert isinstance(verdict, CallPermitted) and verdict.approval is not None
    assert (verdict.approval.status, verdict.approval.decided_by) == ("approved", "ops")
    assert step.book is not None and await step.book.pending() == []
    assert await step.check(checked()) is PERMITTED  # without the policy's word: no approval


async def test_the_approvals_step_refuses_what_cannot_wait() -> None:
    listed = {"approvers": ["ops"], "tools": ["knowledge-query"]}

    for_a_hook = await (await approvals(listed)).check(checked(wait=False))
    no_store = await (await approvals(listed, store=False)).check(checked())
    nobody = await (await approvals({"tools": ["knowledge-query"]})).check(checked())

    assert isinstance(for_a_hook, CallStopped) and "hooks do not wait" in for_a_hook.observation
    assert isinstance(no_store, CallStopped) and "keeps no approvals" in no_store.observation
    assert isinstance(nobody, CallStopped) and "no one is named" in nobody.observation
    assert {for_a_hook.step, no_store.step, nobody.step} == {"approval"}


async def test_a_call_that_waited_on_an_approval_gone_since_is_refused_not_asked_anew() -> None:
    """A task going on with its call brings the approval it waited on: gone from the store
    (withdrawn, or refused as not sealed), the call is refused; a client's reply naming an
    approval the store does not have is asked anew."""
    listed = {"approvers": ["ops"], "tools": ["knowledge-query"]}
    step = await approvals(listed)
    book = step.book
    assert book is not None

    with replying(ApprovalReply("gone-approval", None, waited_on=True)), anyio.fail_after(20):
        waited = await step.check(checked())  # asked anew, it would wait for a person
    asked_anew: list[CallPermitted | CallStopped] = []
    with anyio.move_on_after(20):
        async with anyio.create_task_group() as tasks:

            async def call() -> None:
                with replying(ApprovalReply("gone-approval", None)):
                    asked_anew.append(await step.check(checked()))

            tasks.start_soon(call)
            async for _ in book.changes():
                if await book.pending():
                    tasks.cancel_scope.cancel()

    assert isinstance(waited, CallStopped) and "left the store" in waited.observation
    assert asked_anew == [] and [a.tool for a in await book.pending()] == ["knowledge-query"]


async def test_the_approvals_step_applies_where_a_call_may_need_approval(tmp_path: Path) -> None:
    asking = workflow_snapshot()
    asking["tool"]["knowledge-query"]["approval"] = "always"

    assert not (await approvals({})).applies(REGISTRY)
    assert (await approvals({"tools": ["graph-update"]})).applies(REGISTRY)
    assert (await approvals({})).applies(load_registry(asking))
    engine = cedar(tmp_path)
    assert (await approvals({}, policy=engine)).applies(REGISTRY)
    engine.close()


async def test_teams_a_tool_or_a_policy_names_must_be_configured(tmp_path: Path) -> None:
    snapshot = workflow_snapshot()
    snapshot["tool"]["knowledge-query"]["approval"] = {"approvers": "finance"}
    registry = load_registry(snapshot)
    engine = cedar(
        tmp_path,
        '@approval("legal")\npermit(principal, action, resource) when { context.state == "x" };',
    )

    step = await approvals({"teams": {"finance": ["fiona"]}}, policy=engine)

    assert [(p.field, p.message.split(",")[0]) for p in step.problems(registry)] == [
        ("legal", "is named by a policy's @approval")
    ]
    assert (await approvals({})).problems(registry)[0].field == "finance"
    engine.close()


# ------------------------------------------------------------------ the one composition


async def test_the_steps_toolbus_toml_describes_in_the_order_they_run(tmp_path: Path) -> None:
    engine = cedar(tmp_path)
    store = await connect_state("memory://call-steps-composed")

    steps = call_steps({"approvals": {"approvers": ["ops"]}}, engine=engine, store=store)
    plain = call_steps(None)

    assert [step.name for step in steps] == ["policy", "approval"]
    approval = steps[1]
    assert isinstance(approval, ApprovalStep) and approval.book is not None
    assert approval.policy is engine and approval.settings.approvers == ("ops",)
    # without [policy]: approvals alone, refusing what a descriptor asks (no store)
    assert [step.name for step in plain] == ["approval"]
    assert isinstance(plain[0], ApprovalStep) and plain[0].book is None
    CallSteps(steps).close()


async def test_the_policy_s_approval_reaches_the_approvals_step_through_the_runner(
    tmp_path: Path,
) -> None:
    store = await connect_state("memory://call-steps-through")
    steps = CallSteps(
        call_steps({"approvals": {"approvers": ["ops"]}}, engine=cedar(tmp_path), store=store)
    )
    approval = steps.steps[1]
    assert isinstance(approval, ApprovalStep)

    verdict = await approved_by_ops(
        steps, approval.book, checked("text-completion", {"prompt": "delete it all"})
    )
    through = await steps.check(checked("text-completion", {"prompt": "a poem"}))

    assert isinstance(verdict, CallPermitted) and verdict.approval is not None
    assert verdict.approval.status == "approved"
    assert verdict.approve_first is not None  # the policy's word, and the approval it led to
    assert through is PERMITTED  # the policy permits; nobody else asks
    steps.close()
