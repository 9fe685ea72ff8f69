"""A door's calls, run as tasks: :class:`CallTasks`.

A call that cannot answer at once (it waits for a person's approval, its tool
takes long, its caller asked for a task) becomes a
:class:`~toolbus.domain.tasks.Task` that a
:class:`~toolbus.application.tasks.TaskRunner` runs in the background. What
every door needs for that lives here, so that a door adds a protocol, not a
way of waiting:

* :func:`call_task`: the task one call becomes, with what any replica needs to
  make it again (:class:`~toolbus.domain.tasks.TaskCall`: groups, state, request
  id, arguments, and the bus call id it goes on the bus under, whichever
  replica sends it);
* :meth:`CallTasks.call`: the work: makes the call in a session, reporting as
  it goes (``input-required`` while it waits for an approval, ``working`` again
  once approved; ``input-required`` while its tool asks its caller, as far as
  the door recorded that its caller can answer: the three steps of
  :mod:`toolbus.application.tasks.asking`);
* :meth:`CallTasks.resume`: how a replica goes on with a task another one
  left: the call waits again for the same approval (found again by the call's
  request id, tool call id and arguments), or, approved and sent already, is
  sent again under the same bus call id (answered from the service's memory on
  a persistent queue), never asked for anew;
* :meth:`CallTasks.withdraw`: a task whose call will not be made (cancelled,
  or failed when its door stopped) withdraws the approval it waited for.

Tasks whose caller is gone by the time they run (``toolbus call --async``
writes one to the shared store and exits) carry the door name
:data:`CLI_DOOR`; every door that keeps tasks registers :meth:`CallTasks.resume`
for them, so that whichever replica looks through the store first makes the call.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from contextlib import ExitStack
from typing import Any

import anyio

from toolbus.application.agent.asking import (
    ApprovalAnswer,
    ApprovalReply,
    listening,
    replying,
)
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import sending_as
from toolbus.application.calls.relaying import continuing, relaying
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.doors.door import FrontDoor
from toolbus.application.tasks import (
    TaskEnd,
    TaskInputRelay,
    TaskProgress,
    TaskRunner,
    new_task_id,
    task_continuation,
    task_kinds,
)
from toolbus.domain.access.approvals import Approval
from toolbus.domain.calls.input_requests import InputKind, InputReply
from toolbus.domain.errors import AccessDenied, StateStoreError, ToolbusError
from toolbus.domain.tasks import Task, TaskCall, TaskError, TaskSettings

log = logging.getLogger("toolbus.tasks")

#: The door name of tasks made for a caller that does not wait (``toolbus call --async``).
CLI_DOOR = "cli"
#: Bus call ids of tasks' calls are derived from the task ids, under this namespace.
_TASK_CALLS = uuid.UUID("6f0d5c1e-3b8a-4f0e-9a57-2d6c1b3e8f41")

#: How a task's call is made in its session: (session, tool, arguments, tool call id).
MakeCall = Callable[[AgentSession, str, Mapping[str, Any], str | None], Awaitable[CallOutcome]]


def bus_call_id(task_id: str) -> str:
    """The bus call id a task's call goes on the bus under, whichever replica sends it."""
    return str(uuid.uuid5(_TASK_CALLS, task_id))


def call_task(
    *,
    door: str,
    owner: str,
    tool: str,
    groups: Sequence[str],
    state: str,
    request_id: str,
    arguments: Mapping[str, Any],
    tool_call_id: str | None = None,
    session: str | None = None,
    ttl: float,
    now: float | None = None,
    task_id: str | None = None,
    input_kinds: Collection[InputKind] = (),
    given: InputReply | None = None,
) -> Task:
    """A new task for one call of ``tool`` by ``owner``, made in a session with the
    (granted) ``groups`` in ``state`` under ``request_id``; ``session`` names the held
    session it was made in, if any. ``input_kinds``: what the caller can answer a tool
    that asks (none: such a tool hears at once that it cannot ask); ``given``: the
    answers (and sealed state) the caller brings to what the tool asked before."""
    at = time.time() if now is None else now
    task_id = task_id or new_task_id()
    return Task(
        id=task_id,
        owner=owner,
        tool=tool,
        door=door,
        created_at=at,
        updated_at=at,
        ttl=ttl,
        call=TaskCall(
            groups=tuple(groups),
            state=state,
            request_id=request_id,
            # No id is kept as "": the approval a call waits for is found by it.
            tool_call_id=tool_call_id or "",
            arguments=dict(arguments),
            session=session,
            call_id=bus_call_id(task_id),
            input_kinds=tuple(sorted(input_kinds)),
            input_responses=dict(given.responses) if given is not None else {},
            input_state=given.state if given is not None else None,
        ),
    )


def task_end(outcome: CallOutcome) -> TaskEnd:
    """How a call's outcome ends its task: ``completed`` with the observation, or
    ``failed`` with ``{type, message}``: the tool's error type, or ``refused-<why>``
    for a call that was not made (``refused-approval``, ``refused-policy``,
    ``refused-state``, ``refused-unknown``, ``refused-hook``); the message is what a
    model would read."""
    if outcome.ok:
        return TaskEnd(result=outcome.observation, state=outcome.state)
    if outcome.status == "error":
        kind = outcome.error_type or "tool-error"
    else:
        kind = f"refused-{outcome.refusal or 'hook'}"
    return TaskEnd(error=TaskError(type=kind, message=outcome.observation), state=outcome.state)


def waiting_for(approval: Approval) -> str:
    """What a task waiting for ``approval`` says it waits for."""
    deciders = approval.deciders() or approval.approvers
    return f"waiting for approval by {', '.join(deciders)}"


class CallTasks:
    """One door's calls as tasks; see the module docs.

    Args:
        door: the front door whose sessions make the calls (its approvals, its rules).
        runner: runs the door's tasks.
        settings: the ``[tasks]`` table (a task's call may take ``call-timeout``).
    """

    def __init__(self, door: FrontDoor, runner: TaskRunner, settings: TaskSettings) -> None:
        self.door = door
        self.runner = runner
        self.settings = settings
        #: Calls this replica makes, by task id: set to hand their questions back.
        self._handing_back: dict[str, anyio.Event] = {}

    @property
    def book(self) -> ApprovalBook | None:
        return self.door.book

    # ------------------------------------------------------------------ sessions

    def session(
        self,
        user: str,
        groups: Sequence[str] | None,
        state: str | None,
        *,
        request_id: str | None = None,
    ) -> AgentSession:
        """A one-call session for a call that runs as a task: checked as the door checks
        every session (:class:`AccessDenied`, audited), its calls allowed ``call-timeout``."""
        door = self.door
        registry = door.tools.registry
        rules = dataclasses.replace(
            door.rules(registry, places=False), timeout=self.settings.call_timeout
        )
        return AgentSession(
            door.tools,
            registry,
            user=user,
            groups=groups,
            state=state,
            request_id=request_id,
            rules=rules,
        )

    def resumed_session(
        self, task: Task, held: HeldSession | None = None, *, steps: bool = True
    ) -> AgentSession:
        """The session ``task``'s call is made in on a replica going on with it: ``held``
        (the held session it was made in), else one of its own as the task describes it.
        The groups are checked again (:class:`AccessDenied`). Without ``steps`` the door's
        call steps are not run again: the call was approved, and its approval spent on it.
        """
        call = task.call
        assert call is not None
        if held is None:
            held = HeldSession(
                request_id=call.request_id,
                user=task.owner,
                requested_groups=call.groups,
                groups=call.groups,
                initial_state=call.state,
                state=call.state,
                started_at=task.created_at,
            )
        door = self.door
        registry = door.tools.registry
        rules = dataclasses.replace(
            door.rules(registry, places=False), timeout=self.settings.call_timeout
        )
        if not steps:
            rules = dataclasses.replace(rules, steps=None)
        return AgentSession(door.tools, registry, resume=held, rules=rules)

    # ------------------------------------------------------------------ the work

    async def call(
        self,
        task: Task,
        session: AgentSession,
        progress: TaskProgress,
        *,
        approval_id: str | None = None,
        make: MakeCall | None = None,
    ) -> CallOutcome:
        """Make ``task``'s call in ``session``, reporting as it goes; the outcome.

        ``approval_id``: the approval the call waits for already (asked for when the
        call was first made), found again rather than asked anew. ``make``: how the
        call is made (default ``session.call``; a door streaming the answer passes
        its own, which may count the chunks in ``progress``). Its questions wait in
        the task, unless they are handed back (:meth:`hand_back`).
        """
        handed_back = self._handing_back[task.id] = anyio.Event()
        try:
            return await self._call(task, session, progress, approval_id, make, handed_back)
        finally:
            if self._handing_back.get(task.id) is handed_back:
                del self._handing_back[task.id]

    def hand_back(self, task_id: str) -> bool:
        """The caller answers the questions of ``task_id``'s tool in place, and makes the
        call again (an MCP ``optional`` tool that asked in time): its call, made here,
        ends asking (a limit counted it, and notes the state it is made again with).
        False when this replica does not make its call."""
        handed_back = self._handing_back.get(task_id)
        if handed_back is None:
            return False
        handed_back.set()
        return True

    async def _call(
        self,
        task: Task,
        session: AgentSession,
        progress: TaskProgress,
        approval_id: str | None,
        make: MakeCall | None,
        handed_back: anyio.Event,
    ) -> CallOutcome:
        call = task.call
        assert call is not None
        book = self.book
        async with anyio.create_task_group() as watching:

            async def waiting(approval: Approval) -> ApprovalAnswer | None:
                await progress.waiting(waiting_for(approval), approval.id)
                if book is not None:
                    watching.start_soon(_approved_when_decided, book, approval.id, progress)
                return None

            with ExitStack() as context:
                context.enter_context(listening(waiting))
                context.enter_context(sending_as(call.call_id or bus_call_id(task.id)))
                # What its tool asks waits in the task until its caller answered; a replica
                # going on with the task brings the answers given so far.
                relay = TaskInputRelay(progress, task_kinds(task), handed_back)
                context.enter_context(relaying(relay))
                given = task_continuation(task)
                if given is not None:
                    context.enter_context(continuing(given))
                if approval_id is not None:
                    waited = ApprovalReply(approval_id, None, waited_on=True)
                    context.enter_context(replying(waited))
                    if book is not None:
                        watching.start_soon(_approved_when_decided, book, approval_id, progress)
                if make is None:
                    outcome = await session.call(
                        task.tool, call.arguments, call.tool_call_id or None
                    )
                else:
                    outcome = await make(
                        session, task.tool, call.arguments, call.tool_call_id or None
                    )
            watching.cancel_scope.cancel()
        return outcome

    async def resume(self, task: Task, progress: TaskProgress) -> TaskEnd:
        """Go on with a one-call task another replica left (a :data:`~toolbus.application.
        tasks.runner.Resume`); register it for :data:`CLI_DOOR` (and the door's own one-call
        tasks)."""
        try:
            session, approval_id = await self.resumed(task)
        except AccessDenied as exc:
            return TaskEnd(error=TaskError(type=exc.error_type, message=str(exc)))
        async with session:
            try:
                outcome = await self.call(task, session, progress, approval_id=approval_id)
            except ToolbusError as exc:
                return unavailable(exc)
        return task_end(outcome)

    async def resumed(
        self, task: Task, held: HeldSession | None = None
    ) -> tuple[AgentSession, str | None]:
        """The session to go on with ``task`` in, and the approval its call waits for.

        A call whose approval was given and spent on it (the replica that made it
        stopped before it was answered) is made again without the door's steps, under
        the same bus call id; one still waiting, or approved and not yet made, finds
        its approval again.
        """
        call = task.call
        assert call is not None
        approval_id = call.approval_id or task.approval_id
        spent = False
        if approval_id is not None and self.book is not None:
            approval = await self.book.get(approval_id)
            spent = approval is not None and approval.status == "approved" and approval.used
        return self.resumed_session(task, held, steps=not spent), None if spent else approval_id

    async def withdraw(self, task: Task) -> None:
        """``task``'s call will not be made: withdraw the approval it waited for (an
        :data:`~toolbus.application.tasks.runner.Abandoned`)."""
        book = self.book
        approval_id = task.approval_id
        if book is None or approval_id is None:
            return
        now = await self.runner.book.get(task.id)
        if now is not None and now.status == "cancelled":
            why = f"its task was {now.message or 'cancelled'}"
        elif now is not None and now.error is not None:
            why = now.error.message
        else:
            why = "its call will not be made"
        await self.withdraw_approval(approval_id, why)

    async def withdraw_approval(self, approval_id: str, why: str) -> None:
        """Withdraw the approval a call waited for, whose call will not be made."""
        book = self.book
        if book is None:
            return
        try:
            await book.withdraw(approval_id, why)
        except StateStoreError as exc:
            log.warning("the approval %s could not be withdrawn: %s", approval_id, exc)


def unavailable(exc: ToolbusError) -> TaskEnd:
    """A task whose call the bus could not serve (the broker away, say)."""
    return TaskEnd(
        error=TaskError(
            type="unavailable",
            message=f"the broker could not serve the call ({type(exc).__name__}); "
            "make it again later",
        )
    )


async def _approved_when_decided(
    book: ApprovalBook, approval_id: str, progress: TaskProgress
) -> None:
    """The task goes on (``working``) once its approval is given.

    It follows the index of pending approvals, not the approval itself, and reads the
    approval once it left the index: the call's own approval step is the one reader of
    the approval while it waits (a record that does not open is refused once).
    """
    async for _ in book.changes():
        if approval_id in await book.waiting_ids():
            continue
        approval = await book.get(approval_id)
        if approval is not None and approval.status == "approved":
            await progress.approved(approval_id)
        return
