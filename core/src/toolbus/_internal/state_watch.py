"""Where a state store's watch keeps the states its reader has not taken yet.

Only the latest state is kept: a reader that falls behind skips the states in
between and gets the newest, which is what a waiter needs (is the approval
decided? what does the session hold now?) and keeps a slow reader from holding
memory. A state equal to the one handed out last (the same version, or absent
again) is not handed out twice, so an engine that repeats itself, or a watch
that starts over after a reconnect, does not wake the reader for nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any

from toolbus.ports import StateEntry

_NOTHING: object = object()


def _same(left: object, right: object) -> bool:
    if isinstance(left, StateEntry) and isinstance(right, StateEntry):
        return left.version == right.version  # cheaper than comparing the values
    return left is right  # both None (absent), or both _NOTHING


class LatestState:
    """The mailbox between a store's watch machinery and the reader of one watch."""

    __slots__ = ("_changed", "_ended", "_handed", "_latest")

    def __init__(self) -> None:
        self._latest: object = _NOTHING
        self._handed: object = _NOTHING
        self._changed = asyncio.Event()
        self._ended = False

    def tell(self, state: StateEntry | None) -> None:
        """The key's state is now ``state``."""
        self._latest = state
        self._changed.set()

    def end(self) -> None:
        """No more states will come (the watch or its store closed): the reader stops."""
        self._ended = True
        self._changed.set()

    async def states(self) -> AsyncIterator[StateEntry | None]:
        while True:
            await self._changed.wait()
            self._changed.clear()
            if self._ended:
                return
            state = self._latest
            if _same(state, self._handed):
                continue
            self._handed = state
            assert state is None or isinstance(state, StateEntry)
            yield state


class Watches:
    """The open watches of one store connection, so that closing it ends them all."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: set[LatestState] = set()

    @asynccontextmanager
    async def opened(
        self, latest: LatestState, follower: Coroutine[Any, Any, None] | None = None
    ) -> AsyncIterator[AsyncIterator[StateEntry | None]]:
        """The states of ``latest`` while the block runs, with ``follower`` (the task
        telling ``latest`` the key's states, if the store needs one) running alongside."""
        self._open.add(latest)
        task = None if follower is None else asyncio.ensure_future(follower)
        try:
            yield latest.states()
        finally:
            self._open.discard(latest)
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    def end_all(self) -> None:
        for latest in list(self._open):
            latest.end()
