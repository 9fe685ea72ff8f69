"""Agent runs that wait for a person, kept as tasks any agent replica goes on with:
:class:`SuspendedRuns`.

The :class:`~toolbus.application.agent.suspension.Suspensions` of an agent
service. A run whose calls wait for approval suspends
(:mod:`~toolbus.application.agent.suspension`); it is kept in the door's state
store (sealed when shared):

* its checkpoint (namespace ``agent-runs``, under its request id), kept until
  the first approval it waits for expires, and the checkpoints' time to live
  beyond;
* its task (door ``agent``): ``input-required``, ``waiting for approval by
  ...``, run by nobody (:meth:`~toolbus.domain.tasks.Task.suspended`) until
  that approval expires; the run's answer becomes its result;
* its entry in the index of suspended runs (namespace ``agent-suspended``):
  the task, the request and the approvals it waits for, and whether it goes
  on on some replica (a task that ends drops what it ran, so the index is
  what still names the request of a cancelled one).

Every agent replica follows the pending approvals and the open tasks
(:meth:`SuspendedRuns.serve`). When an approval a suspended run waits for is
no longer pending (decided anywhere, withdrawn) or its time is up, the replica
wakes the task (:meth:`~toolbus.application.tasks.TaskRunner.wake`); the first
replica to take it goes on with the run from its checkpoint
(:meth:`SuspendedRuns.resume`) in one of its places, sending its events to the
asker. It answers for the task under a lease as for any task: if it dies,
another replica takes the task over from the run's latest checkpoint. A run
that suspends again stays the same task.

A suspended run whose task is cancelled (``toolbus tasks cancel``, ``DELETE
/v1/tasks/{id}``) ends: the first replica to see it withdraws the approvals it
waited for, drops its checkpoint, writes the session's audit record
(``cancelled``) and tells the asker (an ``error`` event of type
``cancelled``). One cancelled while it goes on is ended by the replica running
it, which learns it at its next renewal (or, if that replica is gone, by the
first to look once the lease is up).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import anyio
from anyio.abc import TaskStatus

from toolbus._internal.stored_json import change_json, read_json
from toolbus.application.agent.checkpoints import Checkpoint, RunCheckpoints
from toolbus.application.agent.service import AgentService, failure_event
from toolbus.application.agent.suspension import Suspension
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.tasks import TaskEnd, TaskProgress, TaskRunner, new_task_id
from toolbus.domain.access.approvals import Approval
from toolbus.domain.errors import StateStoreError, TaskClosed, ToolbusError
from toolbus.domain.tasks import Task, TaskCall, TaskError, TaskSettings

log = logging.getLogger("toolbus.agent")

#: The door name of agent runs' tasks.
AGENT_DOOR = "agent"
#: The namespace of the index of suspended runs, and its one key.
NAMESPACE = "agent-suspended"
INDEX = "index"


class SuspendedRuns:
    """The suspended runs of an agent service and its replicas; see the module docs.

    Args:
        runner: runs the tasks of the door (and goes on with them on any replica).
        approvals: the door's approvals (what the runs wait for).
        checkpoints: where runs' checkpoints are kept (the door's store, shared).
        settings: the ``[tasks]`` table (a task's time to live; the lease, which is
            also how often a replica looks through the suspended runs unprompted).
        clock: Unix seconds (replicas compare each other's times).
    """

    def __init__(
        self,
        runner: TaskRunner,
        approvals: ApprovalBook | None,
        checkpoints: RunCheckpoints,
        settings: TaskSettings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.approvals = approvals
        self.checkpoints = checkpoints
        self.settings = settings
        self.clock = clock
        self.store = checkpoints.store
        self._service: AgentService | None = None
        #: Runs going on here, by task id: a run that suspends again says so through its
        #: task's progress.
        self._resuming: dict[str, TaskProgress] = {}
        self._looked_for: anyio.Event | None = None
        self._stopping: anyio.Event | None = None

    # ------------------------------------------------------------------ suspending

    async def suspend(self, saved: Checkpoint, waiting: Sequence[Approval]) -> Suspension:
        """Keep the run ``saved`` describes until one of ``waiting`` is decided or the first
        of them expires (the loop's :class:`~toolbus.application.agent.suspension.
        Suspensions`); the task it is, and what it waits for."""
        now = self.clock()
        first = min(waiting, key=lambda approval: approval.expires_at)
        until = first.expires_at
        message = waiting_for_all(waiting)
        known = saved.task
        task_id = known or new_task_id()
        saved = dataclasses.replace(saved, task=task_id)
        await self.checkpoints.save(saved, ttl=max(until - now, 0.0) + self.checkpoints.ttl)
        approval_ids = [approval.id for approval in waiting]
        entry = {"request": saved.request_id, "approvals": approval_ids}
        await change_json(
            self.store, NAMESPACE, INDEX, lambda index: {**index, task_id: entry}, default={}
        )
        progress = self._resuming.get(task_id)
        if progress is not None:  # going on here after it was suspended before
            await progress.suspend(message, first.id, until)
        elif known is not None and await self.runner.book.get(task_id) is not None:
            await self._suspend_task(task_id, now, until, message, first.id)
        else:
            task = self._task(task_id, saved, first, now)
            await self.runner.book.create(task.suspend(now, until, message, first.id))
        log.info("agent request %s waits as task %s: %s", saved.request_id, task_id, message)
        if await self._decided(approval_ids):
            # Decided before the task said what it waits for: no change is left to wake it.
            await self.runner.wake(task_id)
        return Suspension(task_id, message)

    def _task(self, task_id: str, saved: Checkpoint, first: Approval, now: float) -> Task:
        held = saved.session
        return Task(
            id=task_id,
            owner=held.user,
            tool=first.tool,
            door=AGENT_DOOR,
            created_at=now,
            updated_at=now,
            ttl=self.settings.ttl,
            call=TaskCall(
                groups=held.groups,
                state=held.state,
                request_id=saved.request_id,
                tool_call_id=first.tool_call_id or "",
            ),
        )

    async def _suspend_task(
        self, task_id: str, now: float, until: float, message: str, approval_id: str
    ) -> None:
        with contextlib.suppress(TaskClosed):  # cancelled meanwhile: the next look ends it
            await self.runner.book.change(
                task_id, lambda task: task.suspend(now, until, message, approval_id)
            )

    async def _decided(self, approval_ids: Sequence[str]) -> bool:
        """Whether any of the approvals is no longer pending (the index alone is read)."""
        if self.approvals is None:
            return True
        return not set(approval_ids) <= await self.approvals.waiting_ids()

    # ------------------------------------------------------------------ going on

    async def resume(self, task: Task, progress: TaskProgress) -> TaskEnd:
        """Go on with a suspended run (a :data:`~toolbus.application.tasks.runner.Resume`
        for the door :data:`AGENT_DOOR`): its answer is the task's result."""
        call = task.call
        service = self._service
        assert call is not None and service is not None
        saved = await self.checkpoints.load(call.request_id)
        if saved is None or saved.request is None:
            return TaskEnd(
                error=TaskError(
                    type="unavailable",
                    message="the run's checkpoint is gone (it waited longer than it is kept, "
                    "or it ended on a replica that stopped before its answer was kept); "
                    "ask again",
                )
            )
        self._resuming[task.id] = progress
        await self._going_on(task.id)
        try:
            result = await service.resume(dataclasses.replace(saved, task=task.id))
        except anyio.get_cancelled_exc_class():
            # Cancelled by its owner (or left to another replica, or taken by one).
            with anyio.CancelScope(shield=True):
                await self._cancelled_while_running(task.id, service)
            raise
        finally:
            self._resuming.pop(task.id, None)
        if result is None:
            return TaskEnd(
                error=TaskError(type="agent-failed", message="the agent failed under the run")
            )
        if result.error is not None:
            error = TaskError(type=result.error.type, message=result.error.message)
            return TaskEnd(error=error, state=result.state)
        return TaskEnd(result=result.answer, state=result.state)  # or suspended again

    async def _cancelled_while_running(self, task_id: str, service: AgentService) -> None:
        try:
            task = await self.runner.book.get(task_id)
            if task is None or task.status != "cancelled":
                return
            entry = await self._claim(task_id)
            if entry is None:
                return
            request_id, approval_ids = entry
            await self._withdraw(approval_ids, f"its task was {task.message or 'cancelled'}")
            await self.checkpoints.finish(request_id)
            # Its session wrote its record (cancelled) as the run was cancelled.
            await service.events_of(request_id)(failure_event("cancelled", _cancelled(task)))
        except ToolbusError as exc:
            log.warning("ending the cancelled run of task %s failed: %s", task_id, exc)

    # ------------------------------------------------------------------ following

    async def serve(
        self, service: AgentService, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Go on with the suspended runs whose approvals are decided, here or on whichever
        replica takes them, and end those cancelled, until :meth:`stop`; ``service`` runs
        them here. Signals ``task_status`` once it follows the approvals and tasks."""
        self._service = service
        self.runner.resumes(AGENT_DOOR, self.resume)
        stopping = self._stopping = anyio.Event()
        self._looked_for = anyio.Event()
        async with anyio.create_task_group() as following:
            if self.approvals is not None:
                following.start_soon(self._follow, self.approvals.changes())
            following.start_soon(self._follow, self.runner.book.open_changes())
            task_status.started()
            look_at = 0.0
            while not stopping.is_set():
                wait = min(max(0.0, look_at - self.clock()), self.settings.lease)
                with anyio.move_on_after(wait):
                    await self._looked_for.wait()
                if stopping.is_set():
                    break
                self._looked_for = anyio.Event()
                try:
                    look_at = await self.look()
                except StateStoreError as exc:
                    log.warning("looking through the suspended agent runs failed: %s", exc)
                    look_at = self.clock() + self.settings.lease
            following.cancel_scope.cancel()

    def stop(self) -> None:
        """Stop following (the suspended runs stay, for the other replicas)."""
        if self._stopping is not None:
            self._stopping.set()
        if self._looked_for is not None:
            self._looked_for.set()

    async def _follow(self, changes: AsyncIterator[None]) -> None:
        try:
            async for _ in changes:
                if self._looked_for is not None:
                    self._looked_for.set()
        except ToolbusError as exc:  # the store went away: the periodic look goes on
            log.warning("stopped following changes for suspended agent runs: %s", exc)

    async def look(self) -> float:
        """Look through the suspended runs once: wake those whose approvals were decided
        (or whose time is up), end those cancelled, forget those ended. When to look again
        at the latest (the first expiry of an approval still waited for)."""
        index: dict[str, Any] = await read_json(self.store, NAMESPACE, INDEX, {})
        look_at = math.inf
        if not index:
            return look_at
        waiting = frozenset() if self.approvals is None else await self.approvals.waiting_ids()
        now = self.clock()
        orphaned = False
        for task_id, entry in index.items():
            task = await self.runner.book.get(task_id)
            if task is None or not isinstance(entry, dict):
                await self._forget(task_id)  # its time to live ran out: nothing to go on with
            elif task.final and task.status != "cancelled":
                await self._forget(task_id)  # it ended: its answer is its result
            elif task.final:
                # A run going on when it was cancelled is ended by its replica, which
                # learns it at its next renewal; if that replica is gone, here.
                left_to_runner = task.updated_at + self.runner.lease
                if entry.get("going on") and now < left_to_runner:
                    look_at = min(look_at, left_to_runner)
                else:
                    await self._end_cancelled(task)
            elif task.suspended(now):
                if not set(entry.get("approvals", ())) <= waiting:
                    await self.runner.wake(task_id)
                else:
                    look_at = min(look_at, task.runner_until)
            elif task.orphaned(now):
                orphaned = True  # woken, or its replica died: the first to look takes it
        if orphaned:
            await self.runner.sweep()
        return look_at

    async def _end_cancelled(self, task: Task) -> None:
        """The suspended run of ``task`` (cancelled) ends, by this replica if it is first."""
        entry = await self._claim(task.id)
        if entry is None:
            return
        request_id, approval_ids = entry
        saved = await self.checkpoints.load(request_id)
        await self._withdraw(approval_ids, f"its task was {task.message or 'cancelled'}")
        await self.checkpoints.finish(request_id)
        service = self._service
        if saved is not None and saved.request is not None and service is not None:
            await service.loop.cancel_suspended(
                saved, _cancelled(task), emit=service.events_of(request_id)
            )
        log.info("agent request %s ended: its task %s was cancelled", request_id, task.id)

    async def _going_on(self, task_id: str) -> None:
        """Say in the index that the run of ``task_id`` goes on (on this replica): if its
        task is cancelled, this replica ends the run, not one that looks."""

        def marked(index: dict[str, Any]) -> dict[str, Any] | None:
            entry = index.get(task_id)
            if not isinstance(entry, dict) or entry.get("going on"):
                return None
            return {**index, task_id: {**entry, "going on": True}}

        await change_json(self.store, NAMESPACE, INDEX, marked, default={})

    async def _claim(self, task_id: str) -> tuple[str, list[str]] | None:
        """Take the run of ``task_id`` off the index: its request and approvals, if this
        replica took it off (of replicas ending a run at once, one does)."""
        claimed: tuple[str, list[str]] | None = None

        def without(index: dict[str, Any]) -> dict[str, Any] | None:
            nonlocal claimed
            entry = index.get(task_id)
            if entry is None:
                claimed = None
                return None
            claimed = _entry(entry)
            return {key: value for key, value in index.items() if key != task_id}

        await change_json(self.store, NAMESPACE, INDEX, without, default={})
        return claimed

    async def _forget(self, task_id: str) -> None:
        entry = await self._claim(task_id)
        if entry is not None:
            await self.checkpoints.finish(entry[0])

    async def _withdraw(self, approval_ids: Sequence[str], why: str) -> None:
        if self.approvals is None:
            return
        for approval_id in approval_ids:
            await self.approvals.withdraw(approval_id, why)


def waiting_for_all(approvals: Sequence[Approval]) -> str:
    """What a run waiting for ``approvals`` says it waits for: who may decide them."""
    deciders: dict[str, None] = {}
    for approval in approvals:
        deciders.update(dict.fromkeys(approval.deciders() or approval.approvers))
    return f"waiting for approval by {', '.join(deciders)}"


def _entry(entry: Any) -> tuple[str, list[str]] | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("request"), str):
        return None
    approvals = entry.get("approvals")
    ids = [str(i) for i in approvals] if isinstance(approvals, list) else []
    return entry["request"], ids


def _cancelled(task: Task) -> str:
    return f"the run was {task.message or 'cancelled'} (task {task.id})"
