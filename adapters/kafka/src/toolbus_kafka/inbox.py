"""Deliveries fetched but not yet taken, shared by the readers of one subscription.

Readers fetch for themselves: one reader at a time (the *fetcher*) waits in
aiokafka's ``getmany``, the others wait here. A batch goes first to the readers
waiting here, the rest is kept for the next ones. No task sits between aiokafka
and the readers, so a message costs no extra hop through the event loop.

When the fetcher leaves with a delivery while others still wait and nothing is
kept, it passes them the :data:`BATON`: the reader that gets it fetches next.

Reading is cancel-safe: whatever is handed to a reader in the same instant the
reader is cancelled (a delivery or the baton) goes to the next reader. Items
can also be put back at the front (a nacked delivery) or purged (deliveries of
partitions the member gave up).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterable
from typing import Final, Generic, TypeVar

T = TypeVar("T")


class _Baton:
    def __repr__(self) -> str:
        return "BATON"


#: Handed to a waiting reader instead of an item: "nobody is fetching; you do".
BATON: Final = _Baton()


class InboxClosed(Exception):
    """The inbox was closed: nothing more will arrive. ``__cause__`` is why, if it failed."""


class Inbox(Generic[T]):
    """A FIFO with any number of readers."""

    __slots__ = ("_error", "_getters", "_items", "closed")

    def __init__(self) -> None:
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[T | _Baton]] = deque()
        self._error: BaseException | None = None
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    @property
    def error(self) -> BaseException | None:
        """Why the inbox was closed, when it was closed by a failure."""
        return self._error

    @property
    def waiting(self) -> bool:
        """Whether some reader waits here."""
        return bool(self._getters)

    def _hand(self, item: T | _Baton) -> bool:
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(item)
                return True
        return False

    def put_many(self, items: Iterable[T]) -> None:
        """Hand items to waiting readers, keeping the rest in order."""
        for item in items:
            if not self._hand(item):
                self._items.append(item)

    def push_front(self, item: T) -> None:
        """Put an item ahead of everything else (a redelivery, or a cancelled read's item)."""
        if not self._hand(item):
            self._items.appendleft(item)

    def pass_baton(self) -> None:
        """Wake one waiting reader to fetch (no-op when nobody waits)."""
        self._hand(BATON)

    def purge(self, unwanted: Callable[[T], bool]) -> None:
        """Drop the kept items ``unwanted`` picks."""
        self._items = deque(item for item in self._items if not unwanted(item))

    def pop(self) -> T | None:
        """The next kept item, if any, without waiting."""
        return self._items.popleft() if self._items else None

    async def get(self) -> T | _Baton:
        """Wait for an item, or for the :data:`BATON`; :class:`InboxClosed` once closed."""
        if self.closed:
            raise self._closed_error()
        getter: asyncio.Future[T | _Baton] = asyncio.get_running_loop().create_future()
        self._getters.append(getter)
        try:
            return await getter
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled() and getter.exception() is None:
                # Handed over in the instant we were cancelled: pass it on.
                handed = getter.result()
                if isinstance(handed, _Baton):
                    self.pass_baton()
                else:
                    self.push_front(handed)
            raise

    def close(self, error: BaseException | None = None) -> None:
        """Stop: readers waiting now or later get :class:`InboxClosed`; items are dropped."""
        if self.closed:
            return
        self.closed = True
        self._error = error
        self._items.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_exception(self._closed_error())

    def _closed_error(self) -> InboxClosed:
        closed = InboxClosed()
        closed.__cause__ = self._error
        return closed
