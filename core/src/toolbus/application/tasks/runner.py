"""Running calls as tasks, on whichever replica: :class:`TaskRunner`.

A door hands the runner a new task and the *work* that makes its call; the
runner keeps the task in the :class:`~toolbus.application.tasks.book.TaskBook`
and runs the work in the background, outliving the request that started it.
The work reports as it goes (:class:`TaskProgress`: waiting for an approval,
going on, a chunk of its answer, the bus call it sent) and ends with a
:class:`TaskEnd`; the runner writes each step to the task.

Replicas share the work: a runner answers for the tasks it runs until a time it
renews every few seconds (:attr:`TaskRunner.lease`). When a replica stops
without finishing them (killed, or stopped with other replicas left), another
replica's runner finds them (their time ran out) and goes on with each through
the door's *resume* for it (:meth:`TaskRunner.resumes`): the call waits again
for the same approval, or waits for (or sends again) the same bus call.

Work may also *suspend* its task (:meth:`TaskProgress.suspend`): it waits for
someone (``input-required``) with nobody running it, and no worker waits for
it either. The door wakes it once what it waits for happened
(:meth:`TaskRunner.wake`), or its time is up; then the first replica to look
goes on with it through the door's resume, as with a task whose replica
stopped. An agent run waiting for a person's approval is such a task.

A task is cancelled by its owner from any replica: the runner running it sees
the task cancelled (at once on its own replica, at its next renewal on
another) and cancels the work; a call on the bus is cancelled as the client
cancels a call. A task whose call can no longer be made (cancelled, or its
door stopped with nobody to go on with it) is *abandoned*: the door withdraws
what it waited for (its approval).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from toolbus.application.tasks.book import TaskBook
from toolbus.domain.errors import StateStoreError, TaskClosed, TaskNotFound
from toolbus.domain.tasks import Task, TaskError, TaskStatus

log = logging.getLogger("toolbus.tasks")

#: Seconds a runner answers for a task it runs before it must renew (a third of it
#: passes between renewals): how long a task waits for another replica after its
#: replica died.
DEFAULT_LEASE = 15.0


@dataclass(frozen=True, slots=True)
class TaskEnd:
    """How the work ended: a ``result`` (completed) or an ``error`` (failed), and the
    session's ``state`` after the call."""

    result: str | None = None
    error: TaskError | None = None
    state: str | None = None


class TaskProgress:
    """What the work of one task reports as it goes; each report is written to the task."""

    def __init__(self, runner: TaskRunner, task_id: str) -> None:
        self._runner = runner
        self.task_id = task_id
        #: Whether the work suspended the task (:meth:`suspend`): its end is not written.
        self.suspended = False

    async def waiting(self, message: str, approval_id: str | None = None) -> None:
        """The call waits for someone (``input-required``): ``message`` says for whom."""
        now = self._runner.clock()
        await self._runner._write(
            self.task_id,
            lambda task: task.moved(
                now, "input-required", message=message, approval_id=approval_id
            ),
        )

    async def asking(self, requests: dict[str, Any], state: str | None) -> None:
        """The call's tool asks its caller (``input-required``): ``requests`` by key, as
        MCP writes them, answered with :meth:`TaskRunner.answer`; ``state`` is what it
        sealed for the call that brings the answers."""
        now = self._runner.clock()

        def asking(task: Task) -> Task:
            moved = task.moved(
                now,
                "input-required",
                message="waiting for the caller's answers to what the tool asks",
                input_requests=requests,
            )
            if moved.call is None:
                return moved
            # A key asked again (by the next call of a run, or because its answer did not
            # fit) waits for a new answer, not the one given before.
            kept = {k: v for k, v in moved.call.input_responses.items() if k not in requests}
            call = moved.call.model_copy(update={"input_state": state, "input_responses": kept})
            return moved.model_copy(update={"call": call})

        await self._runner._write(self.task_id, asking)

    async def answers(self, keys: Iterable[str]) -> dict[str, Any]:
        """The caller's answers to ``keys``, once every one is given (by
        :meth:`TaskRunner.answer`, on any replica)."""
        wanted = set(keys)
        async for task in self._runner.book.changes(self.task_id):
            if task is None or task.final:
                raise TaskClosed(self.task_id, "gone" if task is None else task.status)
            given = {} if task.call is None else task.call.input_responses
            if wanted <= set(given):
                return {key: given[key] for key in wanted}
        raise TaskClosed(self.task_id, "gone")

    async def going_on(self) -> None:
        """The call goes on (``working`` again)."""
        now = self._runner.clock()
        await self._runner._write(
            self.task_id,
            lambda task: task if task.status == "working" else task.moved(now, "working"),
        )

    async def approved(self, approval_id: str) -> None:
        """The approval the call waited for was given: it goes on (``working`` again), and
        a replica going on with it later makes the call under that approval."""
        now = self._runner.clock()

        def approved(task: Task) -> Task:
            call = task.call
            if call is not None:
                call = call.model_copy(update={"approval_id": approval_id})
            if task.status == "working":
                return task.model_copy(update={"call": call})
            return task.moved(now, "working", call=call)

        await self._runner._write(self.task_id, approved)

    async def suspend(self, message: str, approval_id: str | None, until: float) -> None:
        """The work stops here without ending the task: it waits for someone
        (``input-required``; ``message`` says for whom) with nobody running it, until a
        replica wakes it (:meth:`TaskRunner.wake`) or ``until`` passes; then a replica goes
        on with it, through the door's resume. What the work returns after this is not
        written."""
        self.suspended = True
        now = self._runner.clock()
        await self._runner._write(
            self.task_id, lambda task: task.suspend(now, until, message, approval_id)
        )

    async def chunk(self) -> None:
        """One more chunk of the answer came."""
        now = self._runner.clock()
        await self._runner._write(
            self.task_id,
            lambda task: task.model_copy(update={"progress": task.progress + 1, "updated_at": now}),
        )

    async def sent(self, call_id: str) -> None:
        """The call went on the bus as ``call_id``: a replica going on with the task waits
        for that call, never a new one."""

        def sent(task: Task) -> Task:
            if task.call is None:
                return task
            return task.model_copy(
                update={"call": task.call.model_copy(update={"call_id": call_id})}
            )

        await self._runner._write(self.task_id, sent)


#: The work of a task: makes its call, reporting as it goes.
Work = Callable[[TaskProgress], Awaitable[TaskEnd]]
#: How a door goes on with a task another replica began.
Resume = Callable[[Task, TaskProgress], Awaitable[TaskEnd]]
#: Told of a task whose call will not be made (to withdraw what it waited for).
Abandoned = Callable[[Task], Awaitable[None]]


class TaskRunner:
    """Runs a door's tasks in the background; see the module docs.

    Args:
        book: where the tasks are kept.
        shared: whether other replicas share the book (a shared store): then they go
            on with the tasks of a replica that stops; otherwise a stopping runner
            fails its unfinished tasks.
        lease: seconds this runner answers for a task before renewing.
        on_abandoned: told of each task whose call will not be made.
        name: this runner's name in the tasks it runs (default a random one).
    """

    def __init__(
        self,
        book: TaskBook,
        *,
        shared: bool,
        lease: float = DEFAULT_LEASE,
        on_abandoned: Abandoned | None = None,
        name: str | None = None,
    ) -> None:
        self.book = book
        self.clock = book.clock
        self.shared = shared
        self.lease = lease
        self.on_abandoned = on_abandoned
        self.name = name or f"runner-{uuid.uuid4().hex[:12]}"
        self._resumes: dict[str, Resume] = {}
        self._running: dict[str, anyio.CancelScope] = {}
        self._group: TaskGroup | None = None
        self._leaving = False

    def resumes(self, door: str, resume: Resume) -> None:
        """Go on with ``door``'s tasks whose runner stopped, through ``resume``."""
        self._resumes[door] = resume

    @property
    def running(self) -> frozenset[str]:
        """The tasks running here now."""
        return frozenset(self._running)

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> TaskRunner:
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._renew_forever)
        if self.shared:
            self._group.start_soon(self._sweep_forever)
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        group = self._group
        assert group is not None
        with anyio.CancelScope(shield=True):
            await self.leave()
        group.cancel_scope.cancel()
        await group.__aexit__(None, None, None)
        self._group = None

    @property
    def leaving(self) -> bool:
        """Whether this runner is stopping (:meth:`leave`): it starts and takes no task."""
        return self._leaving

    async def leave(self) -> None:
        """Stop running tasks here, now: leave each unfinished one to another replica (or
        fail it, with no other replica), and stop its work. From then on the runner starts
        no task and takes none over. A door calls it as soon as it is told to stop, so that
        the callers waiting on its tasks learn at once; leaving the runner does it too."""
        self._leaving = True
        with anyio.CancelScope(shield=True):
            await self._hand_over()

    async def _hand_over(self) -> None:
        """Stopping: leave each unfinished task to another replica, or fail it."""
        for task_id in list(self._running):
            scope = self._running.get(task_id)
            if scope is not None:
                scope.cancel()  # its end is not written: it is left, or failed, here
            try:
                if self.shared:
                    await self.book.change(task_id, lambda task: task.run_by(self.name, 0.0))
                    log.info("task %s is left to another replica", task_id)
                else:
                    before = await self.book.get(task_id)
                    task = await self.book.change(task_id, self._stopped)
                    # As it was: what it waited for (its approval) is withdrawn.
                    await self._abandon(before or task)
            except (TaskClosed, TaskNotFound):
                pass
            except StateStoreError as exc:
                log.warning("task %s could not be handed over: %s", task_id, exc)

    def _stopped(self, task: Task) -> Task:
        return task.moved(
            self.clock(),
            "failed",
            error=TaskError(
                type="unavailable",
                message="the door stopped before the call was made; make it again",
            ),
        )

    # ------------------------------------------------------------------ tasks

    async def start(self, task: Task, work: Work) -> Task:
        """Keep ``task`` and run ``work`` for it in the background; the task as kept."""
        group = self._group
        if group is None:
            raise RuntimeError("the task runner is not running; enter it first (async with)")
        if self._leaving:
            raise RuntimeError("the task runner is stopping; it starts no task")
        kept = await self.book.create(task.run_by(self.name, self.clock() + self.lease))
        scope = anyio.CancelScope()
        self._running[kept.id] = scope
        group.start_soon(self._run, kept.id, work, scope)
        return kept

    async def cancel(self, owner: str, task_id: str, *, by: str | None = None) -> Task:
        """Cancel ``owner``'s task; :class:`TaskNotFound` for another's, :class:`TaskClosed`
        for one that ended. ``by``: who cancels it, when not its owner (an operator)."""
        now = self.clock()

        def cancelled(task: Task) -> Task:
            if task.owner != owner:
                raise TaskNotFound(task_id)
            return task.moved(now, "cancelled", message=f"cancelled by {by or owner}")

        before = await self.book.owned(owner, task_id)
        task = await self.book.change(task_id, cancelled)
        scope = self._running.get(task_id)
        if scope is not None:
            scope.cancel()
        await self._abandon(before)
        return task

    async def answer(self, owner: str, task_id: str, responses: dict[str, Any]) -> Task:
        """Give ``owner``'s task answers to what its tool asks, by key (keys it does not
        ask are ignored); :class:`TaskNotFound` for another's, :class:`TaskClosed` for one
        that ended. The replica running it goes on once every request is answered."""
        now = self.clock()

        def answered(task: Task) -> Task:
            if task.owner != owner:
                raise TaskNotFound(task_id)
            return task.answered(now, responses)

        return await self.book.change(task_id, answered)

    async def _run(self, task_id: str, work: Work, scope: anyio.CancelScope) -> None:
        progress = TaskProgress(self, task_id)
        end: TaskEnd | None = None
        with scope:
            try:
                end = await work(progress)
            except Exception:
                reference = uuid.uuid4().hex[:12]
                log.exception("task %s failed (ref %s)", task_id, reference)
                end = TaskEnd(
                    error=TaskError(
                        type="internal-error",
                        message=f"the call failed inside the door (ref {reference})",
                    )
                )
        self._running.pop(task_id, None)
        if end is None:  # cancelled: by its owner, or the runner is stopping
            return
        if progress.suspended:  # it waits, run by nobody, until it is woken
            return
        now = self.clock()
        status: TaskStatus = "completed" if end.error is None else "failed"
        try:
            await self.book.change(
                task_id,
                lambda task: task.moved(
                    now, status, result=end.result, error=end.error, state=end.state
                ),
            )
        except (TaskClosed, TaskNotFound):
            log.info(
                "task %s ended after it was cancelled or dropped; its answer is not kept", task_id
            )
        except StateStoreError as exc:
            log.warning("task %s ended, but its end could not be kept: %s", task_id, exc)

    async def _write(self, task_id: str, change: Callable[[Task], Task]) -> None:
        try:
            await self.book.change(task_id, change)
        except TaskClosed:
            pass  # cancelled meanwhile: its work is being cancelled
        except StateStoreError as exc:
            log.warning("task %s: a step could not be kept: %s", task_id, exc)

    async def _abandon(self, task: Task) -> None:
        if self.on_abandoned is None:
            return
        try:
            await self.on_abandoned(task)
        except Exception:
            log.exception("withdrawing what task %s waited for failed", task.id)

    # ------------------------------------------------------------------ replicas

    async def _renew_forever(self) -> None:
        while True:
            await anyio.sleep(self.lease / 3)
            await self.renew()

    async def renew(self) -> None:
        """Answer for the tasks running here a while longer; stop those cancelled (or taken
        over) elsewhere."""
        if self._leaving:
            return  # what runs here was left to others: renewing would take it back
        for task_id in list(self._running):
            until = self.clock() + self.lease
            try:
                current = await self.book.get(task_id)
                if current is None or current.final or current.runner != self.name:
                    scope = self._running.get(task_id)
                    if scope is not None:
                        scope.cancel()
                    continue
                await self.book.change(task_id, self._renewed(until))
            except (TaskClosed, TaskNotFound):
                continue
            except StateStoreError as exc:
                log.warning("task %s could not be renewed: %s", task_id, exc)

    def _renewed(self, until: float) -> Callable[[Task], Task]:
        return lambda task: task.run_by(self.name, until)

    async def _sweep_forever(self) -> None:
        while True:
            await anyio.sleep(self.lease / 2)
            try:
                await self.sweep()
            except StateStoreError as exc:
                log.warning("looking for tasks left by other replicas failed: %s", exc)

    async def wake(self, task_id: str) -> bool:
        """A suspended task (:meth:`TaskProgress.suspend`) goes on now: the first replica to
        look for it takes it (this one, at once, unless another was quicker). ``False`` when
        it is not suspended (running, taken, ended or gone)."""
        now = self.clock()

        def woken(task: Task) -> Task:
            if not task.suspended(now):
                raise TaskClosed(task.id, task.status)
            return task.model_copy(update={"runner_until": 0.0})

        try:
            await self.book.change(task_id, woken)
        except (TaskClosed, TaskNotFound):
            return False
        await self.sweep()
        return True

    async def sweep(self) -> list[str]:
        """Go on with the tasks whose runner stopped; the ids taken."""
        group = self._group
        if group is None or self._leaving:
            return []
        now = self.clock()
        taken = []
        for task_id, until in (await self.book.open_tasks()).items():
            if until >= now or task_id in self._running:
                continue
            task = await self.book.get(task_id)
            if task is None or not task.orphaned(now) or task.door not in self._resumes:
                continue
            resume = self._resumes[task.door]

            def take(current: Task, seen: Task = task) -> Task:
                if current.runner_until != seen.runner_until or current.final:
                    raise TaskClosed(current.id, "taken")  # another replica was quicker
                return current.run_by(self.name, self.clock() + self.lease)

            try:
                kept = await self.book.change(task_id, take)
            except (TaskClosed, TaskNotFound):
                continue
            log.info("going on with task %s (%s), left by %s", task_id, kept.tool, task.runner)
            scope = anyio.CancelScope()
            self._running[task_id] = scope
            group.start_soon(self._run, task_id, _resuming(resume, kept), scope)
            taken.append(task_id)
        return taken


def _resuming(resume: Resume, task: Task) -> Work:
    async def work(progress: TaskProgress) -> TaskEnd:
        return await resume(task, progress)

    return work


def new_task_id() -> str:
    """A fresh task id: 32 hex digits."""
    return uuid.uuid4().hex
