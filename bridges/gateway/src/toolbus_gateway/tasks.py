"""The gateway's calls that become tasks: :class:`GatewayTasks`.

A call becomes a task (answered ``202 Accepted`` with ``Location: /v1/tasks/{id}``)

* at once, when its caller asks for one (``Prefer: respond-async``, RFC 7240)
  or its tool's ``task-support`` is ``required``; with ``Prefer: wait=N`` a
  task that ends within N seconds is answered as a call would have been;
* at once too when its caller says what it can answer (``can_answer``), should
  its tool ask: the call is answered as a call when it ends within
  ``approval-wait`` without asking, and as its task, ``input-required`` with
  the tool's ``input_requests``, as soon as its tool asks (answered at
  ``POST /v1/tasks/{id}/input``, :meth:`GatewayTasks.answer`);
* when it waits for a person's approval: the call waits in place for
  ``approval-wait`` seconds (``[tasks]``), then its caller gets its task rather
  than a load balancer's timeout.

A tool whose ``task-support`` is ``forbidden`` never becomes a task: its calls
wait in place. The work of a task runs in the background under the gateway's
:class:`~toolbus.application.tasks.TaskRunner` and is kept in the gateway's
store, so any replica answers for it, and another goes on with it when this
one stops (shared store) or dies.

Stopping (:meth:`GatewayTasks.stop`): the callers waiting on a task are
answered at once (``202`` with the task another replica goes on with, or, with
no other replica, the ``unavailable`` error), and so are calls waiting in
place for a person, whose approvals are withdrawn.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Collection, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio

from toolbus import CallOutcome
from toolbus.application.agent.asking import ApprovalAnswer, listening
from toolbus.application.agent.session import AgentSession
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.keeping import SESSION
from toolbus.application.doors.tasks import (
    CLI_DOOR,
    CallTasks,
    call_task,
    task_end,
    unavailable,
    waiting_for,
)
from toolbus.application.tasks import (
    TaskBook,
    TaskEnd,
    TaskProgress,
    TaskRunner,
    fitting_answers,
    task_kinds,
)
from toolbus.domain.access.approvals import Approval
from toolbus.domain.calls.input_requests import InputKind
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.errors import AccessDenied, TaskNotFound, ToolbusError
from toolbus.domain.tasks import Task, TaskError, TaskSettings
from toolbus.plugins import connect_state
from toolbus.ports import StateStore
from toolbus_gateway.models import outcome_view
from toolbus_gateway.preference import Preference
from toolbus_gateway.session_events import SessionEvents
from toolbus_gateway.stats import CallStats

log = logging.getLogger("toolbus.gateway")

#: The door name of the gateway's tasks.
TASK_DOOR = "gateway"


class GatewayStopping(ToolbusError):
    """The gateway stopped before the call was made (HTTP 503, ``unavailable``)."""

    def __init__(self, why: str = "the gateway stopped before the call was made") -> None:
        super().__init__(f"{why}; make it again (another replica, or this one restarted, takes it)")


class _HandedOver(Exception):
    """A call started waiting for a person: its task makes it from here on."""

    def __init__(self, approval: Approval) -> None:
        super().__init__(approval.id)
        self.approval = approval


@dataclass(eq=False)
class _Settling:
    """A request waiting for a task's outcome in this process."""

    done: anyio.Event = field(default_factory=anyio.Event)
    outcome: CallOutcome | None = None
    #: The bus failed under the call: the waiting caller is answered as for a call.
    error: ToolbusError | None = None


class GatewayTasks:
    """The gateway's tasks; see the module docs.

    Args:
        door: the gateway's front door.
        book: where tasks are kept (the gateway's store).
        runner: runs them (this process's).
        settings: the ``[tasks]`` table.
        events: the held sessions' events (on every replica, with a shared store), for
            their tasks' ``task`` and ``call`` events.
        stats: the console's call rates.
        changed: marks a console panel changed.
    """

    def __init__(
        self,
        door: FrontDoor,
        book: TaskBook,
        runner: TaskRunner,
        settings: TaskSettings,
        *,
        events: SessionEvents,
        stats: CallStats,
        changed: Callable[[str], None],
    ) -> None:
        self.door = door
        self.book = book
        self.runner = runner
        self.settings = settings
        self.calls = CallTasks(door, runner, settings)
        self.events = events
        self.stats = stats
        self.changed = changed
        self._settling: dict[str, _Settling] = {}
        #: Calls waiting in place for a person: their cancel scopes, by approval id.
        self._in_place: dict[str, anyio.CancelScope] = {}
        self.stopping = anyio.Event()

    @classmethod
    async def started(
        cls,
        stack: AsyncExitStack,
        door: FrontDoor,
        store: StateStore | None,
        settings: TaskSettings,
        *,
        shared: bool,
        events: SessionEvents,
        stats: CallStats,
        changed: Callable[[str], None],
    ) -> GatewayTasks:
        """The gateway's tasks, run until ``stack`` closes: kept in ``store`` (the door's,
        sealed; ``shared`` when other replicas use it too), or in this process's memory
        without one, when this replica is the only one to run them."""
        if store is None:
            store = await connect_state(f"memory://gateway-tasks-{uuid.uuid4().hex}")
            stack.push_async_callback(store.close)
        runner = TaskRunner(TaskBook(store), shared=shared, lease=settings.lease)
        tasks = cls(
            door, runner.book, runner, settings, events=events, stats=stats, changed=changed
        )
        runner.on_abandoned = tasks.calls.withdraw
        runner.resumes(TASK_DOOR, tasks.resume)
        runner.resumes(CLI_DOOR, tasks.calls.resume)
        await stack.enter_async_context(runner)
        return tasks

    async def follow(self) -> None:
        """The console's tasks panel changes whenever any replica's open tasks do."""
        try:
            async for _ in self.book.open_changes():
                self.changed("tasks")
        except ToolbusError as exc:
            log.warning("stopped following tasks: %s", exc)

    # ------------------------------------------------------------------ calls

    def session(self, user: str, groups: list[str] | None, state: str | None) -> AgentSession:
        """A one-call session for a call that may run as a task (AccessDenied, audited)."""
        return self.calls.session(user, groups, state)

    async def begin(
        self,
        session: AgentSession,
        name: str,
        arguments: Mapping[str, Any] | str | None,
        tool_call_id: str | None,
        preference: Preference,
        *,
        held_id: str | None = None,
        can_answer: Collection[InputKind] = (),
    ) -> CallOutcome | Task:
        """Make a call, or start it as a task: the outcome, or the task (then
        :meth:`settle` it). ``held_id`` names the held session it is made in (whose
        session object the caller keeps); a one-call ``session`` is this method's to
        close, or to hand to the task. ``can_answer``: what the caller can answer its
        tool, should it ask (the call then runs as a task)."""
        tool = _offered(session, name)
        support = "forbidden" if tool is None else tool.task_support
        as_task = runs_as_task(support, preference, can_answer)
        parsed = arguments if isinstance(arguments, Mapping) else None
        if tool is not None and as_task and parsed is not None:
            if self.stopping.is_set():
                await self._close(session, held_id)
                raise GatewayStopping("the gateway is stopping")
            task = self._task(session, tool, parsed, tool_call_id, held_id, can_answer)
            return await self._start(task, None if held_id else session, None)
        handed: _HandedOver | None = None
        scope = anyio.CancelScope()
        waited: list[str] = []

        async def waits(approval: Approval) -> ApprovalAnswer | None:
            if support == "forbidden" or parsed is None or self.stopping.is_set():
                waited.append(approval.id)
                self._in_place[approval.id] = scope
                return None  # it waits here, in place
            raise _HandedOver(approval)

        try:
            with scope, listening(waits):
                outcome = await session.call(name, arguments, tool_call_id=tool_call_id)
        except _HandedOver as over:
            handed = over
        except BaseException as exc:
            if held_id is None:  # the session's record says how it ended
                with anyio.CancelScope(shield=True):
                    await session.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        finally:
            for approval_id in waited:
                self._in_place.pop(approval_id, None)
        if scope.cancelled_caught:  # stopping, while it waited for a person
            with anyio.CancelScope(shield=True):
                for approval_id in waited:
                    await self.calls.withdraw_approval(
                        approval_id, "the gateway stopped before the call was made"
                    )
                await self._close(session, held_id)
            raise GatewayStopping()
        if handed is None:
            self._record(outcome)
            if held_id is None:
                await session.close()
            return outcome
        assert tool is not None and parsed is not None
        task = self._task(session, tool, parsed, tool_call_id, held_id, can_answer)
        task = task.moved(
            task.created_at,
            "input-required",
            message=waiting_for(handed.approval),
            approval_id=handed.approval.id,
        )
        # A one-call session goes on in the task; a held one is resumed from its data.
        return await self._start(task, None if held_id else session, handed.approval.id)

    async def settle(self, task: Task, seconds: float) -> CallOutcome | Task:
        """The outcome of a task this process runs, if it ends within ``seconds``; else the
        task as it stands (for the ``202``), at once when its tool asks its caller (who
        said they can answer). Raises :class:`GatewayStopping` for a task that failed
        because the gateway stopped with no other replica to go on with it."""
        settling = self._settling.get(task.id)
        try:
            if settling is not None and seconds > 0:
                with anyio.move_on_after(seconds):
                    async with anyio.create_task_group() as either:

                        async def stopped() -> None:
                            await self.stopping.wait()
                            either.cancel_scope.cancel()

                        either.start_soon(stopped)
                        if task_kinds(task):
                            either.start_soon(self._asked, task.id, either.cancel_scope)
                        await settling.done.wait()
                        either.cancel_scope.cancel()
                if settling.outcome is not None:
                    return settling.outcome
                if settling.error is not None:
                    raise settling.error
        finally:
            self._settling.pop(task.id, None)
        now = await self.book.get(task.id)
        if now is None:
            return task
        if self.stopping.is_set() and now.status == "failed":
            raise GatewayStopping()  # no other replica goes on with it
        return now

    async def _asked(self, task_id: str, scope: anyio.CancelScope) -> None:
        """Cancel ``scope`` once the task's tool asks its caller: the caller answers now."""
        try:
            await self.book.first(task_id, lambda task: bool(task.input_requests))
        except ToolbusError as exc:  # the store is away: the outcome is still awaited
            log.warning("task %s: stopped watching for its questions: %s", task_id, exc)
            return
        scope.cancel()

    def _task(
        self,
        session: AgentSession,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any],
        tool_call_id: str | None,
        held_id: str | None,
        can_answer: Collection[InputKind],
    ) -> Task:
        return call_task(
            door=TASK_DOOR,
            owner=session.user,
            tool=tool.name,
            groups=session.groups,
            state=session.state,
            request_id=session.request_id,
            arguments=arguments,
            tool_call_id=tool_call_id,
            session=held_id,
            ttl=self.settings.ttl,
            input_kinds=can_answer,
        )

    async def _start(
        self, task: Task, session: AgentSession | None, approval_id: str | None
    ) -> Task:
        self._settling[task.id] = _Settling()
        try:
            kept = await self.runner.start(task, self._work(task, session, approval_id))
        except BaseException:
            self._settling.pop(task.id, None)
            if session is not None:
                with anyio.CancelScope(shield=True):
                    await session.close()
            raise
        self.changed("tasks")
        return kept

    async def _close(self, session: AgentSession, held_id: str | None) -> None:
        if held_id is None:
            await session.close()

    def _record(self, outcome: CallOutcome) -> None:
        if outcome.tool is not None and outcome.status != "refused":
            # The tool's own time: a person's approval wait before it is not the tool's latency.
            self.stats.record(outcome.tool, outcome.seconds, outcome.ok)
            self.changed("stats")

    # ------------------------------------------------------------------ the work

    def _work(
        self, task: Task, session: AgentSession | None, approval_id: str | None
    ) -> Callable[[TaskProgress], Any]:
        async def work(progress: TaskProgress) -> TaskEnd:
            return await self._make(task, session, progress, approval_id)

        return work

    async def resume(self, task: Task, progress: TaskProgress) -> TaskEnd:
        """Go on with a gateway task another replica left."""
        return await self._make(task, None, progress, None)

    async def _make(
        self,
        task: Task,
        session: AgentSession | None,
        progress: TaskProgress,
        approval_id: str | None,
    ) -> TaskEnd:
        call = task.call
        assert call is not None
        held = None
        settling = self._settling.get(task.id)
        try:
            async with anyio.create_task_group() as events:
                if call.session is not None:
                    events.start_soon(self._follow, task.id, task.owner, call.session)
                    held = await self.door.held.get(task.owner, SESSION, call.session)
                if session is None:
                    try:
                        session, approval_id = await self.calls.resumed(
                            task, None if held is None else held.session
                        )
                    except AccessDenied as denied:  # its permissions changed meanwhile
                        events.cancel_scope.cancel()
                        return TaskEnd(error=TaskError(type=denied.error_type, message=str(denied)))
                try:
                    outcome = await self.calls.call(
                        task, session, progress, approval_id=approval_id
                    )
                finally:
                    with anyio.CancelScope(shield=True):
                        if held is not None:
                            await self.door.held.keep(held, session)
                        else:
                            await session.close()
                events.cancel_scope.cancel()
        except ToolbusError as exc:
            log.warning("task %s: the call could not be made: %s", task.id, exc)
            if settling is not None:
                settling.error = exc
                settling.done.set()
            return unavailable(exc)
        self._record(outcome)
        if settling is not None:
            settling.outcome = outcome
            settling.done.set()
        if call.session is not None:
            await self.events.call(task.owner, call.session, _outcome_event(outcome))
        self.changed("tasks")
        return task_end(outcome)

    async def _follow(self, task_id: str, owner: str, session_id: str) -> None:
        """Each change of a held session's task, as a ``task`` event of the session (on
        every replica where the session's events are listened to)."""
        async for task in self.book.changes(task_id):
            if task is None:
                return
            await self.events.task(owner, session_id, task.view())
            if task.final:
                return

    # ------------------------------------------------------------------ reading, cancelling

    async def visible(self, user: str, task_id: str, *, operator: bool) -> Task:
        """The task, for its owner or an operator; :class:`TaskNotFound` for anyone else."""
        task = await self.book.get(task_id)
        if task is None or not (operator or task.owner == user):
            raise TaskNotFound(task_id)
        return task

    async def answer(self, user: str, task_id: str, responses: Mapping[str, Any]) -> Task:
        """Answer what the task's tool asks, as its owner (the questions are theirs: to an
        operator, as to anyone else, the task does not exist here); every answer is checked
        against its request before any is given (:class:`UnfitAnswers`)."""
        task = await self.visible(user, task_id, operator=False)
        answered = await self.runner.answer(user, task_id, fitting_answers(task, responses))
        self.changed("tasks")
        return answered

    async def cancel(self, user: str, task_id: str, *, operator: bool) -> Task:
        """Cancel the task, as its owner or an operator."""
        task = await self.visible(user, task_id, operator=operator)
        cancelled = await self.runner.cancel(
            task.owner, task_id, by=None if user == task.owner else user
        )
        self.changed("tasks")
        return cancelled

    # ------------------------------------------------------------------ stopping

    async def stop(self) -> None:
        """The gateway is told to stop: answer every caller waiting on a task or in place
        for a person now (see the module docs)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        await self.runner.leave()
        for approval_id, scope in list(self._in_place.items()):
            book = self.door.book
            approval = None if book is None else await book.get(approval_id)
            if approval is None or approval.status == "pending":
                scope.cancel()


def runs_as_task(
    support: str, preference: Preference, can_answer: Collection[InputKind] = ()
) -> bool:
    """Whether a call of a tool with this ``task-support`` runs as a task from the start:
    asked for, required by its tool, or its caller can answer its tool's questions; a
    tool that forbids it never does."""
    return support == "required" or (
        (preference.respond_async or bool(can_answer)) and support != "forbidden"
    )


def _offered(session: AgentSession, name: str) -> ToolDescriptor | None:
    """The tool ``name`` names, if the session offers it now (else the call is refused at
    once, and answered as any refusal)."""
    registry = session.registry
    if not registry.is_available(name, session.groups, session.state):
        return None
    return registry.tool(name)


def _outcome_event(outcome: CallOutcome) -> dict[str, Any]:
    return outcome_view(outcome).model_dump(mode="json", by_alias=True)
