"""Agent runs whose calls wait for approval suspend as tasks, and go on once it is decided.

Agent services ("replicas") in one process on the in-memory bus, sharing one
in-memory state store as replicas share NATS key-value or Redis: each its own
front door, checkpoints, task runner and suspended runs, as ``toolbus agent
serve`` composes them. The replicas on NATS and Redis, as processes, one of
them SIGKILLed, are in tests/scaling/test_agent_suspension.py.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup

from toolbus.application.agent.audit import AuditRecord, ListAuditSink
from toolbus.application.agent.checkpoints import RunCheckpoints
from toolbus.application.agent.client import AgentClient
from toolbus.application.agent.loop import AgentLimits, AgentLoop
from toolbus.application.agent.service import AgentService
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import tool_service
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.conversations import DoorConversations
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.doors.suspended_runs import AGENT_DOOR, SuspendedRuns
from toolbus.application.tasks import TaskBook, TaskRunner
from toolbus.domain.access.approvals import Approval
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.config.loading import load_registry
from toolbus.domain.tasks import TaskSettings
from toolbus.memory.state import connect as connect_state
from toolbus.ports import StateStore
from toolbus.scripted.llm import ScriptedLLM
from toolbus.scripted.script import Script, ScriptedTurn
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

QUEUES = {
    "refund": ("persistent://tg/request/refund", "non-persistent://tg/response/refund"),
    "lookup": ("persistent://tg/request/lookup", "non-persistent://tg/response/lookup"),
}
PERMISSIONS = {"users": {"alice": ["default"], "bob": ["default"], "ops": ["*"]}, "fallback": []}
SETTINGS = TaskSettings(lease=2)


def snapshot() -> dict[str, Any]:
    def tool(name: str) -> dict[str, Any]:
        return {
            "type": "tool-service",
            "name": name,
            "description": f"the {name} tool",
            "service": name,
            "arguments": [{"name": "what", "type": "string", "description": "what"}],
        }

    services = {
        name: {"id": name, "request-queue": request, "response-queue": response}
        for name, (request, response) in QUEUES.items()
    }
    return {"tool-service": services, "tool": {name: tool(name) for name in QUEUES}}


@dataclass
class Tools:
    runs: Counter[str] = field(default_factory=Counter)
    #: When set, refund waits for it (after saying it started).
    hold: anyio.Event | None = None
    refunding: anyio.Event = field(default_factory=anyio.Event)

    def services(self) -> list[Any]:
        @tool_service(
            "refund", request_queue=QUEUES["refund"][0], response_queue=QUEUES["refund"][1]
        )
        async def refund(what: str) -> str:
            self.runs[f"refund {what}"] += 1
            self.refunding.set()
            if self.hold is not None:
                await self.hold.wait()
            return f"refunded {what}"

        @tool_service(
            "lookup", request_queue=QUEUES["lookup"][0], response_queue=QUEUES["lookup"][1]
        )
        async def lookup(what: str) -> str:
            self.runs[f"lookup {what}"] += 1
            return f"found {what}"

        return [refund, lookup]


@dataclass
class Replica:
    """One agent service with its parts, as ``toolbus agent serve`` composes them."""

    service: AgentService
    runs: SuspendedRuns
    runner: TaskRunner
    door: FrontDoor
    audit: ListAuditSink
    scope: anyio.CancelScope

    @property
    def approvals(self) -> ApprovalBook:
        assert self.door.book is not None
        return self.door.book

    async def stop(self) -> None:
        """Stop it as a SIGTERM does: take no request, leave its tasks to the others."""
        self.runs.stop()
        self.service.stop()
        await self.runner.leave()
        self.scope.cancel()


class Plays(Script):
    """The model's script for each question (each conversation its own)."""

    def __init__(self, plays: dict[str, list[dict[str, Any]]]) -> None:
        super().__init__([{"text": "This question was not scripted."}])
        self.plays = {question: Script(turns) for question, turns in plays.items()}

    def next_turn(self, conversation: str, tools: Sequence[str] = ()) -> ScriptedTurn:
        return self.plays[conversation].next_turn(conversation, tools)


@dataclass
class Deployment:
    kit: ToolTestKit
    store: StateStore
    script: Plays
    tools: Tools
    stack: AsyncExitStack
    approvals: dict[str, Any] = field(
        default_factory=lambda: {"approvers": ["ops"], "tools": ["refund"], "timeout": 60}
    )
    #: The replicas' ``[[limits]]``.
    limits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def tasks(self) -> TaskBook:
        return TaskBook(self.store)

    @property
    def checkpoints(self) -> RunCheckpoints:
        return RunCheckpoints(self.store)

    async def replica(self, concurrency: int = 1, stack: AsyncExitStack | None = None) -> Replica:
        """A replica, for the deployment's life (or ``stack``'s)."""
        stack = stack or self.stack
        settings: dict[str, Any] = {"permissions": PERMISSIONS, "approvals": self.approvals}
        if self.limits:
            settings["limits"] = self.limits
        audit = ListAuditSink()
        door = FrontDoor.from_files(
            self.kit.tools(load_registry(snapshot())),
            local=None,
            settings=settings,
            audit=audit,
            metrics=ToolbusMetrics.disabled(),
            steps=call_steps(settings, store=self.store),
            holder=StoredHolder(self.store),
        )
        checkpoints = RunCheckpoints(self.store, ttl=60)
        runner = await stack.enter_async_context(
            TaskRunner(TaskBook(self.store), shared=True, lease=SETTINGS.lease)
        )
        runs = SuspendedRuns(runner, door.book, checkpoints, SETTINGS)
        loop = AgentLoop(
            ScriptedLLM(self.script),
            DoorConversations(door),
            limits=AgentLimits(max_iterations=5, time_limit=30),
            metrics=ToolbusMetrics.disabled(),
            checkpoints=checkpoints,
            suspensions=runs,
        )
        service = AgentService(self.kit.bus, loop, concurrency=concurrency)
        group = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(group.cancel_scope.cancel)
        await group.start(service.serve)
        await group.start(runs.serve, service)
        return Replica(service, runs, runner, door, audit, group.cancel_scope)


@asynccontextmanager
async def deployment(
    plays: dict[str, list[dict[str, Any]]], **fields: Any
) -> AsyncIterator[Deployment]:
    tools = Tools()
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*tools.services())
        store = await connect_state("memory://suspended-runs")
        stack.push_async_callback(store.close)
        yield Deployment(kit, store, Plays(plays), tools, stack, **fields)


class Asker:
    """Asks on the bus as ``toolbus ask`` does (an ``AgentClient``); keeps each question's
    events."""

    def __init__(self, client: AgentClient) -> None:
        self.client = client
        self.events: dict[str, list[AgentEvent]] = {}
        self.request_ids: dict[str, str] = {}
        self._waiting: dict[str, anyio.Event] = {}
        self._done: dict[str, anyio.Event] = {}

    async def ask(self, question: str, user: str = "alice") -> None:
        events = self.events[question] = []
        request_id = self.request_ids[question] = uuid.uuid4().hex
        request = AgentRequest(question=question, user=user)
        async for event in self.client.ask(request, timeout=30, request_id=request_id):
            events.append(event)
            if event.chunk_type == "waiting":
                self._event(self._waiting, question).set()
                self._waiting[question] = anyio.Event()  # for the next suspension
        self._event(self._done, question).set()

    @staticmethod
    def _event(events: dict[str, anyio.Event], question: str) -> anyio.Event:
        return events.setdefault(question, anyio.Event())

    async def waiting_for(self, question: str) -> None:
        """Until the run of ``question`` says it waits (again)."""
        await self._event(self._waiting, question).wait()

    async def answered(self, question: str) -> None:
        await self._event(self._done, question).wait()

    def tasks_of(self, question: str) -> list[str]:
        return [e.task.id for e in self.events[question] if e.task is not None]

    def task_of(self, question: str) -> str:
        found = self.tasks_of(question)
        assert found, self.events[question]
        return found[0]

    def final(self, question: str) -> AgentEvent:
        assert self.events[question][-1].last, self.events[question]
        return self.events[question][-1]


@asynccontextmanager
async def asking(kit: ToolTestKit) -> AsyncIterator[tuple[Asker, TaskGroup]]:
    async with AgentClient(kit.bus) as client, anyio.create_task_group() as group:
        yield Asker(client), group


async def first_pending(book: ApprovalBook) -> Approval:
    async for _ in book.changes():
        found = await book.pending()
        if found:
            return found[0]
    raise AssertionError("the change feed ended")


def refund(order: str) -> list[dict[str, Any]]:
    return [
        {"calls": [{"name": "refund", "arguments": {"what": order}}]},
        {"text": f"Done with {order}."},
    ]


LOOKUP = [
    {"calls": [{"name": "lookup", "arguments": {"what": "order 8"}}]},
    {"text": "Order 8 is on its way."},
]


def audit_of(audit: ListAuditSink, tool: str) -> AuditRecord:
    [record] = [r for r in audit.records if any(call.tool == tool for call in r.calls)]
    return record


async def test_a_run_waiting_for_approval_frees_its_worker_and_goes_on_once_approved() -> None:
    async with deployment({"refund order 7": refund("order 7"), "where is order 8": LOOKUP}) as d:
        replica = await d.replica(concurrency=1)
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                task_id = asker.task_of("refund order 7")
                task = await d.tasks.get(task_id)
                assert task is not None
                assert (task.status, task.owner, task.door, task.tool) == (
                    "input-required",
                    "alice",
                    AGENT_DOOR,
                    "refund",
                )
                assert task.message == "waiting for approval by ops"

                # Meanwhile the service's one worker answers another question.
                await asker.ask("where is order 8")
                assert asker.final("where is order 8").content == "Order 8 is on its way."

                [approval] = await replica.approvals.pending()
                assert approval.id == task.approval_id
                await replica.approvals.decide(approval.id, "ops", True, via="api-key")
                await asker.answered("refund order 7")

        final = asker.final("refund order 7")
        assert (final.chunk_type, final.content) == ("answer", "Done with order 7.")
        kinds = [e.chunk_type for e in asker.events["refund order 7"]]
        assert kinds == ["action", "approval", "waiting", "observation", "answer"]
        done = await d.tasks.get(task_id)
        assert done is not None
        assert (done.status, done.result) == ("completed", "Done with order 7.")
        assert d.tools.runs == {"refund order 7": 1, "lookup order 8": 1}
        record = audit_of(replica.audit, "refund")  # one record for the whole request
        assert record.outcome == "completed"
        [call] = record.calls
        assert call.approval is not None and call.approval.status == "approved"
        assert await d.checkpoints.load(asker.request_ids["refund order 7"]) is None


@pytest.mark.parametrize("decision", ["denied", "expired", "withdrawn"])
async def test_a_denied_expired_or_withdrawn_approval_goes_on_with_the_refusal(
    decision: str,
) -> None:
    approvals = {"approvers": ["ops"], "tools": ["refund"], "timeout": 60}
    if decision == "expired":
        approvals["timeout"] = 1
    async with deployment({"refund order 7": refund("order 7")}, approvals=approvals) as d:
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                if decision == "denied":
                    approval = await first_pending(replica.approvals)
                    await replica.approvals.decide(
                        approval.id, "ops", False, "not this one", via="api-key"
                    )
                elif decision == "withdrawn":
                    approval = await first_pending(replica.approvals)
                    await replica.approvals.withdraw(approval.id, "the order moved")
                await asker.answered("refund order 7")

        events = asker.events["refund order 7"]
        [observation] = [e for e in events if e.chunk_type == "observation"]
        assert observation.status == "refused"
        said = {"denied": "not this one", "expired": "No one approved"}.get(
            decision, "its approval was withdrawn (the order moved)"
        )
        assert said in observation.content
        assert asker.final("refund order 7").content == "Done with order 7."
        assert d.tools.runs["refund order 7"] == 0
        task = await d.tasks.get(asker.task_of("refund order 7"))
        assert task is not None and task.status == "completed"
        [call] = audit_of(replica.audit, "refund").calls
        assert call.approval is not None and call.approval.status == decision


async def cancel(d: Deployment, task_id: str, by: str) -> None:
    """What ``toolbus tasks cancel`` does: the task cancelled, its approval withdrawn."""
    before = await d.tasks.get(task_id)
    assert before is not None and before.approval_id is not None
    now = d.tasks.clock()
    await d.tasks.change(task_id, lambda t: t.moved(now, "cancelled", message=f"cancelled by {by}"))
    await ApprovalBook(d.store).withdraw(before.approval_id, f"its task was cancelled by {by}")


async def test_cancelling_the_task_of_a_suspended_run_ends_the_run() -> None:
    async with deployment({"refund order 7": refund("order 7")}) as d:
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                task_id = asker.task_of("refund order 7")
                await cancel(d, task_id, "alice")
                await asker.answered("refund order 7")

        final = asker.final("refund order 7")
        assert final.chunk_type == "error" and final.error is not None
        assert final.error.type == "cancelled"
        assert final.content == f"the run was cancelled by alice (task {task_id})"
        task = await d.tasks.get(task_id)
        assert task is not None and task.status == "cancelled"
        assert await replica.approvals.pending() == []
        assert d.tools.runs["refund order 7"] == 0
        assert await d.checkpoints.load(asker.request_ids["refund order 7"]) is None
        [record] = replica.audit.records
        assert record.outcome == "cancelled" and record.user == "alice"


async def test_another_replica_goes_on_with_a_run_its_replica_suspended() -> None:
    async with deployment({"refund order 7": refund("order 7")}) as d:
        first = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                await first.stop()
                async with AsyncExitStack() as later:
                    second = await d.replica(stack=later)
                    approval = await first_pending(second.approvals)
                    await second.approvals.decide(approval.id, "ops", True, via="api-key")
                    await asker.answered("refund order 7")

        assert asker.final("refund order 7").content == "Done with order 7."
        assert first.audit.records == []  # the suspended session wrote no record
        assert audit_of(second.audit, "refund").outcome == "completed"
        assert d.tools.runs["refund order 7"] == 1


async def test_a_run_that_waits_again_stays_the_same_task() -> None:
    turns = [
        {"calls": [{"name": "refund", "arguments": {"what": "order 7"}}]},
        {"calls": [{"name": "refund", "arguments": {"what": "order 9"}}]},
        {"text": "Both refunded."},
    ]
    async with deployment({"refund both": turns}) as d:
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund both")
                for _ in range(2):
                    await asker.waiting_for("refund both")
                    approval = await first_pending(replica.approvals)
                    await replica.approvals.decide(approval.id, "ops", True, via="api-key")
                await asker.answered("refund both")

        tasks = asker.tasks_of("refund both")
        assert len(tasks) == 2 and tasks[0] == tasks[1]
        task = await d.tasks.get(tasks[0])
        assert task is not None and (task.status, task.result) == ("completed", "Both refunded.")
        assert d.tools.runs == {"refund order 7": 1, "refund order 9": 1}
        assert [record.outcome for record in replica.audit.records] == ["completed"]


async def test_the_calls_of_its_turn_that_need_nobody_are_answered_before_it_suspends() -> None:
    turns = [
        {
            "calls": [
                {"name": "lookup", "arguments": {"what": "order 7"}},
                {"name": "refund", "arguments": {"what": "order 7"}},
            ]
        },
        {"text": "Looked up and refunded."},
    ]
    async with deployment({"look and refund": turns}) as d:
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "look and refund")
                await asker.waiting_for("look and refund")
                seen = [(e.chunk_type, e.tool) for e in asker.events["look and refund"]]
                assert ("observation", "lookup") in seen
                approval = await first_pending(replica.approvals)
                await replica.approvals.decide(approval.id, "ops", True, via="api-key")
                await asker.answered("look and refund")

        kinds = [(e.chunk_type, e.tool) for e in asker.events["look and refund"]]
        assert kinds == [
            ("action", "lookup"),
            ("action", "refund"),
            ("approval", "refund"),
            ("observation", "lookup"),
            ("waiting", None),
            ("observation", "refund"),
            ("answer", None),
        ]
        assert d.tools.runs == {"lookup order 7": 1, "refund order 7": 1}


async def test_cancelling_a_run_while_it_goes_on_ends_it_for_its_asker() -> None:
    async with deployment({"refund order 7": refund("order 7")}) as d:
        d.tools.hold = anyio.Event()  # the approved call is still running when cancelled
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                task_id = asker.task_of("refund order 7")
                approval = await first_pending(replica.approvals)
                await replica.approvals.decide(approval.id, "ops", True, via="api-key")
                await d.tools.refunding.wait()
                now = d.tasks.clock()
                await d.tasks.change(
                    task_id, lambda t: t.moved(now, "cancelled", message="cancelled by alice")
                )
                await asker.answered("refund order 7")  # within a renewal (a third of the lease)
                d.tools.hold.set()  # the tool ends, answering nobody

        final = asker.final("refund order 7")
        assert final.error is not None and final.error.type == "cancelled"
        assert final.content == f"the run was cancelled by alice (task {task_id})"
        [record] = replica.audit.records
        assert record.outcome == "cancelled"
        assert await d.checkpoints.load(asker.request_ids["refund order 7"]) is None
        task = await d.tasks.get(task_id)
        assert task is not None and task.status == "cancelled"


async def test_an_asker_waits_for_a_call_waiting_in_place_as_long_as_its_approval() -> None:
    """Without suspensions (no shared store) a call waits in place; the asker's timeout
    counts from the approval's expiry, not from the approval event."""
    approvals = {"approvers": ["ops"], "tools": ["refund"], "timeout": 2}
    async with deployment({"refund order 7": refund("order 7")}, approvals=approvals) as d:
        replica = await d.replica()
        replica.service.loop.suspensions = None
        with anyio.fail_after(30):
            async with AgentClient(d.kit.bus) as client:
                request = AgentRequest(question="refund order 7", user="alice")
                events = [event async for event in client.ask(request, timeout=1)]
    assert [e.chunk_type for e in events] == ["action", "approval", "observation", "answer"]
    assert events[2].status == "refused"  # expired, after 2 s: more than the 1 s timeout


async def test_a_call_that_waited_counts_once_in_its_limit_when_its_run_goes_on() -> None:
    # One refund an hour: the approved refund, made when its run goes on, is that one.
    limits = [{"name": "refunds", "calls": 1, "every": "1h", "tools": ["refund"]}]
    plays = {"refund order 7": refund("order 7"), "refund order 9": refund("order 9")}
    async with deployment(plays, limits=limits) as d:
        replica = await d.replica()
        with anyio.fail_after(30):
            async with asking(d.kit) as (asker, group):
                group.start_soon(asker.ask, "refund order 7")
                await asker.waiting_for("refund order 7")
                [approval] = await replica.approvals.pending()
                await replica.approvals.decide(approval.id, "ops", True, via="api-key")
                await asker.answered("refund order 7")
                await asker.ask("refund order 9")  # the hour's one refund is used

        assert d.tools.runs == {"refund order 7": 1}
        [observed] = [e for e in asker.events["refund order 9"] if e.chunk_type == "observation"]
        assert "the limit 'refunds' allows 1 call every 1h" in observed.content
        assert await replica.approvals.pending() == []  # nobody was asked about order 9
