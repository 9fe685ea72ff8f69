"""Tasks: kept in a store, run in the background, reported as they go, cancelled by their
owner from any replica, and taken over by another replica when theirs stops."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack

import anyio
import anyio.lowlevel
import pytest

from tests.state.test_memory_conformance import ManualClock
from toolbus.application.tasks import TaskBook, TaskEnd, TaskProgress, TaskRunner, new_task_id
from toolbus.domain.errors import TaskClosed, TaskNotFound
from toolbus.domain.tasks import Task, TaskCall, TaskError
from toolbus.memory import state
from toolbus.ports import StateStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def clock() -> ManualClock:
    clock = ManualClock()
    clock.now = 1_800_000_000.0
    return clock


@pytest.fixture
async def store(clock: ManualClock) -> AsyncIterator[StateStore]:
    connected = await state.connect(f"memory://tasks-{uuid.uuid4().hex}", clock=clock)
    yield connected
    await connected.close()


def a_task(owner: str = "alice", clock: Callable[[], float] | None = None) -> Task:
    now = clock() if clock is not None else 1_800_000_000.0
    return Task(
        id=new_task_id(),
        owner=owner,
        tool="refund",
        door="gateway",
        created_at=now,
        updated_at=now,
        call=TaskCall(
            groups=("default",),
            state="undefined",
            request_id="r-1",
            tool_call_id="t-1",
            arguments={"amount": 40},
        ),
    )


class Gate:
    """Work that waits until the test lets it finish, reporting what the test asks for."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.finish = anyio.Event()
        self.cancelled = False
        self.result = "refunded"

    async def __call__(self, progress: TaskProgress) -> TaskEnd:
        self.started.set()
        try:
            await self.finish.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        return TaskEnd(result=self.result, state="refunded")


async def until(book: TaskBook, task_id: str, check: Callable[[Task], bool]) -> Task:
    """The task once ``check`` holds for it (awaited on the store's watch)."""
    task = await book.first(task_id, check, timeout=10)
    assert task is not None, f"task {task_id}: what was awaited did not come within 10 s"
    return task


async def test_first_waits_past_a_moment_with_no_task(store: StateStore) -> None:
    book = TaskBook(store)
    task = a_task()
    async with anyio.create_task_group() as group:
        found: list[Task | None] = []

        async def wait() -> None:
            found.append(await book.first(task.id, lambda seen: seen.status == "working"))

        group.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        await book.create(task)
    missing = await book.first("no-such-task", lambda seen: True, timeout=0.05)

    assert found == [task]
    assert missing is None


async def test_a_task_runs_in_the_background_and_keeps_its_result(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    gate = Gate()
    async with TaskRunner(book, shared=False) as runner:
        kept = await runner.start(a_task(clock=clock), gate)
        assert kept.status == "working" and kept.runner == runner.name
        await gate.started.wait()
        gate.finish.set()
        done = await until(book, kept.id, lambda task: task.final)
    assert (done.status, done.result, done.state) == ("completed", "refunded", "refunded")
    assert done.call is None and done.runner is None  # nothing left to run it with
    assert [task.id for task in await book.of_owner("alice")] == [kept.id]


async def test_progress_is_written_as_it_comes(store: StateStore, clock: ManualClock) -> None:
    book = TaskBook(store, clock=clock)
    seen: list[tuple[str, str | None, int]] = []
    step = anyio.Event()

    async def work(progress: TaskProgress) -> TaskEnd:
        await progress.waiting("waiting for approval by ops", approval_id="a-1")
        await step.wait()
        await progress.going_on()
        await progress.sent("call-7")
        await progress.chunk()
        await progress.chunk()
        return TaskEnd(result="two chunks")

    async with TaskRunner(book, shared=False) as runner:
        kept = await runner.start(a_task(clock=clock), work)
        waiting = await until(book, kept.id, lambda task: task.status == "input-required")
        seen.append((waiting.status, waiting.approval_id, waiting.progress))
        step.set()
        done = await until(book, kept.id, lambda task: task.final)
    assert seen == [("input-required", "a-1", 0)]
    assert waiting.message == "waiting for approval by ops"
    assert (done.status, done.progress, done.approval_id, done.message) == (
        "completed",
        2,
        None,
        None,
    )


async def test_work_that_fails_ends_the_task_failed_with_a_reference(
    store: StateStore, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    book = TaskBook(store, clock=clock)

    async def broken(progress: TaskProgress) -> TaskEnd:
        raise RuntimeError("db://app:hunter2@db refused")

    async with TaskRunner(book, shared=False) as runner:
        kept = await runner.start(a_task(clock=clock), broken)
        done = await until(book, kept.id, lambda task: task.final)
    assert done.status == "failed" and done.error is not None
    assert done.error.type == "internal-error" and "hunter2" not in done.error.message
    reference = done.error.message.split("(ref ")[1].rstrip(")")
    assert reference in caplog.text and "hunter2" in caplog.text  # the log has the traceback


async def test_only_the_owner_cancels_and_cancelling_stops_the_work(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    abandoned: list[str] = []

    async def abandon(task: Task) -> None:
        abandoned.append(task.id)

    gate = Gate()
    async with TaskRunner(book, shared=False, on_abandoned=abandon) as runner:
        kept = await runner.start(a_task(clock=clock), gate)
        await gate.started.wait()
        with pytest.raises(TaskNotFound):
            await runner.cancel("mallory", kept.id)
        with pytest.raises(TaskNotFound):
            await book.owned("mallory", kept.id)
        cancelled = await runner.cancel("alice", kept.id)
        assert cancelled.status == "cancelled" and cancelled.message == "cancelled by alice"
        with anyio.fail_after(5):
            while kept.id in runner.running:
                await anyio.lowlevel.checkpoint()  # the work's task unwinds
        with pytest.raises(TaskClosed):
            await runner.cancel("alice", kept.id)
    assert gate.cancelled and abandoned == [kept.id]
    final = await book.get(kept.id)
    assert final is not None and final.status == "cancelled"  # not overwritten by its end


async def test_a_cancel_on_another_replica_stops_the_work_at_its_next_renewal(
    store: StateStore, clock: ManualClock
) -> None:
    gate = Gate()
    left, right = TaskBook(store, clock=clock), TaskBook(store, clock=clock)
    async with TaskRunner(left, shared=True) as running, TaskRunner(right, shared=True) as other:
        kept = await running.start(a_task(clock=clock), gate)
        await gate.started.wait()
        await other.cancel("alice", kept.id)
        assert not gate.cancelled  # the work runs on the other replica
        await running.renew()
        with anyio.fail_after(5):
            while kept.id in running.running:
                await anyio.lowlevel.checkpoint()
    assert gate.cancelled


async def test_a_replica_that_stops_leaves_its_tasks_to_another(
    store: StateStore, clock: ManualClock
) -> None:
    gate = Gate()
    resumed: list[tuple[str, str | None]] = []

    async def resume(task: Task, progress: TaskProgress) -> TaskEnd:
        assert task.call is not None
        resumed.append((task.id, task.call.call_id))
        return TaskEnd(result="refunded by the other replica")

    book = TaskBook(store, clock=clock)
    async with TaskRunner(TaskBook(store, clock=clock), shared=True) as other:
        other.resumes("gateway", resume)
        async with TaskRunner(book, shared=True) as stopping:
            kept = await stopping.start(a_task(clock=clock), gate)
            await gate.started.wait()
            await TaskProgress(stopping, kept.id).sent("call-7")
        # Left at once (not when its time runs out): the other replica takes it.
        assert await other.sweep() == [kept.id]
        done = await until(book, kept.id, lambda task: task.final)
    assert resumed == [(kept.id, "call-7")]
    assert done.result == "refunded by the other replica"


async def test_a_replica_that_dies_is_taken_over_once_its_time_runs_out(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    runs: list[str] = []

    async def resume(task: Task, progress: TaskProgress) -> TaskEnd:
        runs.append(task.id)
        return TaskEnd(result="done")

    dead = a_task(clock=clock).run_by("runner-that-died", clock() + 15)
    await book.create(dead)
    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            TaskRunner(TaskBook(store, clock=clock), shared=True)
        )
        second = await stack.enter_async_context(
            TaskRunner(TaskBook(store, clock=clock), shared=True)
        )
        for runner in (first, second):
            runner.resumes("gateway", resume)
        assert await first.sweep() == []  # its runner still answers for it
        clock.advance(16)
        taken = [*await first.sweep(), *await second.sweep()]
        await until(book, dead.id, lambda task: task.final)
    assert taken == [dead.id] and runs == [dead.id]  # one replica of the two goes on with it


async def test_work_that_suspends_its_task_leaves_it_to_whichever_replica_wakes_it(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    until_then = clock() + 300

    async def waits(progress: TaskProgress) -> TaskEnd:
        await progress.suspend("waiting for approval by ops", "a-1", until_then)
        return TaskEnd(result="not written: the task waits")

    resumed: list[str] = []

    async def resume(task: Task, progress: TaskProgress) -> TaskEnd:
        resumed.append(task.id)
        return TaskEnd(result="approved and made")

    async with AsyncExitStack() as stack:
        first = await stack.enter_async_context(
            TaskRunner(TaskBook(store, clock=clock), shared=True)
        )
        second = await stack.enter_async_context(
            TaskRunner(TaskBook(store, clock=clock), shared=True)
        )
        second.resumes("gateway", resume)
        kept = await first.start(a_task(clock=clock), waits)
        waiting = await until(book, kept.id, lambda task: task.status == "input-required")
        await anyio.lowlevel.checkpoint()  # the work returned; nothing more is written
        assert await book.get(kept.id) == waiting
        assert (waiting.runner, waiting.runner_until) == (None, until_then)
        assert waiting.suspended(clock()) and kept.id not in first.running
        assert waiting.message == "waiting for approval by ops" and waiting.approval_id == "a-1"
        assert await second.sweep() == []  # nobody goes on with it before it is woken

        assert await second.wake(kept.id)
        done = await until(book, kept.id, lambda task: task.final)
        assert not await first.wake(kept.id)  # ended: nothing to wake
    assert resumed == [kept.id]
    assert (done.status, done.result) == ("completed", "approved and made")


async def test_a_suspended_task_nobody_wakes_is_taken_once_its_time_is_up(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    waiting = a_task(clock=clock).suspend(clock(), clock() + 60, "waiting for approval", "a-1")
    await book.create(waiting)

    async def resume(task: Task, progress: TaskProgress) -> TaskEnd:
        return TaskEnd(error=TaskError(type="refused-approval", message="nobody approved it"))

    async with TaskRunner(TaskBook(store, clock=clock), shared=True) as runner:
        runner.resumes("gateway", resume)
        assert await runner.sweep() == []
        clock.advance(61)
        assert await runner.sweep() == [waiting.id]
        done = await until(book, waiting.id, lambda task: task.final)
    assert done.error is not None and done.error.type == "refused-approval"


async def test_a_door_with_no_other_replica_fails_what_it_leaves_and_withdraws_it(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    abandoned: list[str] = []

    async def abandon(task: Task) -> None:
        abandoned.append(task.id)

    gate = Gate()
    async with TaskRunner(book, shared=False, on_abandoned=abandon) as runner:
        kept = await runner.start(a_task(clock=clock), gate)
        await gate.started.wait()
    left = await book.get(kept.id)
    assert left is not None and left.status == "failed" and left.error is not None
    assert left.error.type == "unavailable" and "door stopped" in left.error.message
    assert abandoned == [kept.id] and gate.cancelled


async def test_a_final_task_is_kept_for_its_ttl_then_gone(
    store: StateStore, clock: ManualClock
) -> None:
    book = TaskBook(store, clock=clock)
    task = a_task(clock=clock).model_copy(update={"ttl": 60.0})
    await book.create(task)
    ended = await book.change(
        task.id, lambda t: t.moved(clock(), "failed", error=TaskError(type="x", message="y"))
    )
    assert ended.final
    clock.advance(59)
    assert await book.get(task.id) is not None
    clock.advance(2)
    assert await book.get(task.id) is None
    assert await book.of_owner("alice") == []


def test_a_final_task_does_not_move() -> None:
    task = a_task().moved(1.0, "completed", result="ok")
    with pytest.raises(TaskClosed, match="completed already"):
        task.moved(2.0, "cancelled")
    assert "call" not in task.view() and "runner" not in task.view()
