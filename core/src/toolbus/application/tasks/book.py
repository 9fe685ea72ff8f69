"""Where tasks are kept, for every replica of a door: :class:`TaskBook`.

A task (:class:`~toolbus.domain.tasks.Task`) is plain data in a
:class:`~toolbus.ports.StateStore` (namespace ``tasks``): the door's store,
sealed when it is shared, so that whichever replica a caller's next request
reaches answers for the task. Changes are compare-and-set writes.

Beside the tasks themselves the book keeps two indexes, each one JSON value
changed by compare-and-set: each owner's task ids (what ``GET /v1/tasks``
lists; the newest :data:`LISTED` of them), and the tasks not final yet with
the time their runner answers for them until (what a replica looks through
for tasks whose runner stopped, to go on with them).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Callable

import anyio

from toolbus._internal.stored_json import change_json, read_json
from toolbus.domain.errors import StateStoreError, TaskNotFound
from toolbus.domain.tasks import Task
from toolbus.ports import StateEntry, StateStore, WatchableStateStore

log = logging.getLogger("toolbus.tasks")

NAMESPACE = "tasks"
#: The index of tasks not final yet (task ids are hex digits, so never this).
OPEN = "open-index"
#: Task ids listed per owner at most (older ones stay readable until their TTL).
LISTED = 200
#: Seconds between two reads of a task, on a store that cannot watch.
POLL_INTERVAL = 0.5
_TRIES = 64


def owner_key(owner: str) -> str:
    """The key of ``owner``'s index (one-to-one: the owner's length is in it)."""
    return f"owner/{len(owner)}:{owner}"


class TaskBook:
    """The tasks of one door (and its replicas), kept in ``store``.

    Args:
        store: where tasks are kept; shared by every replica (sealed).
        clock: Unix seconds (replicas compare each other's times).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.time,
        namespace: str = NAMESPACE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.namespace = namespace

    # ------------------------------------------------------------------ reading

    async def get(self, task_id: str) -> Task | None:
        found = await self._entry(task_id)
        return None if found is None else found[0]

    async def owned(self, owner: str, task_id: str) -> Task:
        """``owner``'s task ``task_id``; :class:`TaskNotFound` for another's, or none."""
        task = await self.get(task_id)
        if task is None or task.owner != owner:
            raise TaskNotFound(task_id)
        return task

    async def of_owner(self, owner: str) -> list[Task]:
        """``owner``'s tasks that are still kept, newest first."""
        ids: list[str] = await read_json(self.store, self.namespace, owner_key(owner), [])
        found = [task for task_id in ids if (task := await self.get(task_id)) is not None]
        return sorted(
            (task for task in found if task.owner == owner),
            key=lambda task: task.created_at,
            reverse=True,
        )

    async def open_tasks(self) -> dict[str, float]:
        """The tasks not final yet, each with the time its runner answers for it until."""
        index: dict[str, float] = await read_json(self.store, self.namespace, OPEN, {})
        return {str(k): float(v) for k, v in index.items() if isinstance(v, int | float)}

    async def open_changes(self) -> AsyncIterator[None]:
        """Something changed among the tasks not final yet (one value per change, or more):
        a task started, ended, or its runner renewed it; for a view of the open tasks."""
        store = self.store
        if isinstance(store, WatchableStateStore):
            async with store.watch(self.namespace, OPEN) as states:
                async for _ in states:
                    yield None
        else:
            last: object = object()
            while True:
                entry = await store.get(self.namespace, OPEN)
                version = None if entry is None else entry.version
                if version != last:
                    last = version
                    yield None
                await anyio.sleep(POLL_INTERVAL)

    async def open(self) -> list[Task]:
        """The tasks not final yet, oldest first (every owner's: for operators)."""
        found = [
            task
            for task_id in await self.open_tasks()
            if (task := await self.get(task_id)) is not None and not task.final
        ]
        return sorted(found, key=lambda task: task.created_at)

    async def changes(self, task_id: str) -> AsyncIterator[Task | None]:
        """The task's states as they come, starting with the current one (``None``: gone)."""
        store = self.store
        if isinstance(store, WatchableStateStore):
            async with store.watch(self.namespace, task_id) as states:
                async for entry in states:
                    yield _task(entry)
        else:
            last: object = object()
            while True:
                entry = await store.get(self.namespace, task_id)
                version = None if entry is None else entry.version
                if version != last:
                    last = version
                    yield _task(entry)
                await anyio.sleep(POLL_INTERVAL)

    async def first(
        self, task_id: str, check: Callable[[Task], bool], timeout: float = math.inf
    ) -> Task | None:
        """The task once ``check`` holds for it; ``None`` when ``timeout`` seconds came
        first. A moment with no task is waited past, the timeout bounding it: a fresh watch
        of a replicated store may not show a task just written yet."""
        with anyio.move_on_after(timeout):
            async for task in self.changes(task_id):
                if task is not None and check(task):
                    return task
        return None

    async def final(self, task_id: str, timeout: float) -> Task | None:
        """The task once it is final; ``None`` when ``timeout`` seconds came first.

        Raises :class:`TaskNotFound` when it leaves the store meanwhile.
        """
        with anyio.move_on_after(timeout):
            async for task in self.changes(task_id):
                if task is None:
                    raise TaskNotFound(task_id)
                if task.final:
                    return task
        return None

    # ------------------------------------------------------------------ writing

    async def create(self, task: Task) -> Task:
        """Keep a new task; :class:`~toolbus.domain.errors.StateStoreError` if its id is taken."""
        now = self.clock()
        created = await self.store.create(
            self.namespace, task.id, task.to_json(), ttl=_ttl(task, now)
        )
        if created is None:
            raise StateStoreError(f"task {task.id!r} exists already")
        await change_json(
            self.store,
            self.namespace,
            owner_key(task.owner),
            lambda ids: [*[i for i in ids if i != task.id][-(LISTED - 1) :], task.id],
            default=[],
        )
        if not task.final:
            await self._index_open(task)
        return task

    async def change(self, task_id: str, change: Callable[[Task], Task]) -> Task:
        """Apply ``change`` to the task by compare-and-set; the task as written.

        ``change`` may raise (:class:`~toolbus.domain.errors.TaskClosed`, say):
        nothing is written then. Raises :class:`TaskNotFound` for no such task.
        """
        for _ in range(_TRIES):
            found = await self._entry(task_id)
            if found is None:
                raise TaskNotFound(task_id)
            current, version = found
            updated = change(current)
            if updated == current:
                return current
            now = self.clock()
            written = await self.store.update(
                self.namespace, task_id, updated.to_json(), version=version, ttl=_ttl(updated, now)
            )
            if written is not None:
                if updated.final or updated.runner_until != current.runner_until:
                    await self._index_open(updated)
                return updated
        raise StateStoreError(f"task {task_id!r} kept changing; try again")

    # ------------------------------------------------------------------ plumbing

    async def _entry(self, task_id: str) -> tuple[Task, int] | None:
        if task_id == OPEN or task_id.startswith("owner/"):
            return None
        entry = await self.store.get(self.namespace, task_id)
        if entry is None:
            return None
        try:
            return Task.from_json(entry.value), entry.version
        except ValueError:
            log.warning("task %s in the store does not read as a task; ignored", task_id)
            return None

    async def _index_open(self, task: Task) -> None:
        def changed(index: dict[str, float]) -> dict[str, float]:
            now = self.clock()
            # Tasks whose records expired leave the index with them.
            kept = {k: v for k, v in index.items() if k != task.id and v + task.ttl > now}
            if not task.final:
                kept[task.id] = task.runner_until
            return kept

        await change_json(self.store, self.namespace, OPEN, changed, default={})


def _ttl(task: Task, now: float) -> float:
    return max(1.0, task.expires_at(now) - now)


def _task(entry: StateEntry | None) -> Task | None:
    if entry is None:
        return None
    try:
        return Task.from_json(entry.value)
    except ValueError:
        return None
