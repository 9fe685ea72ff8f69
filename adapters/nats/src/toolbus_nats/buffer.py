"""The hand-over between nats-py's message callbacks and a subscription's iterator.

nats-py runs one task per callback subscription and awaits our callback for
each message; the callback only appends to this buffer and wakes a reader, so
no task is created per message. Waiting readers are woken one at a time: the
woken reader takes a message when it runs and wakes the next if more are left,
so a reader that keeps up takes a burst in one turn of the event loop, and one
held up by its message has passed the rest on. Reading is cancel-safe: a reader
cancelled just after being woken passes the wake on.
The buffer is bounded in messages and, when given a way to weigh them, in bytes:
when it is full the callback waits, nats-py's own queue fills up, and nats-py
reports a slow consumer instead of memory growing.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BufferClosed(Exception):
    """Raised to readers of a closed buffer that was closed without an error."""


class DeliveryBuffer(Generic[T]):
    """A bounded FIFO with any number of readers and one writer (the nats-py callback)."""

    __slots__ = (
        "_error",
        "_getters",
        "_items",
        "_space",
        "_waking",
        "_weigh",
        "closed",
        "limit",
        "max_bytes",
        "size",
    )

    def __init__(
        self, limit: int, max_bytes: int = 0, weigh: Callable[[T], int] | None = None
    ) -> None:
        self._items: deque[T] = deque()
        #: Readers waiting; each future is set (to None) to wake one.
        self._getters: deque[asyncio.Future[None]] = deque()
        #: A reader has been woken and has not run yet.
        self._waking = False
        self._space: asyncio.Future[None] | None = None
        self._error: BaseException | None = None
        self._weigh = weigh if max_bytes > 0 else None
        self.limit = limit
        self.max_bytes = max_bytes
        #: Bytes held (0 unless the buffer weighs its items).
        self.size = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self._items)

    def _wake_one(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                self._waking = True
                return

    def offer(self, item: T) -> bool:
        """Keep ``item`` and make sure a reader is on its way; True when the buffer is now full."""
        items = self._items
        items.append(item)
        if not self._waking:
            self._wake_one()
        if self._weigh is not None:
            self.size += self._weigh(item)
            if self.size >= self.max_bytes:
                return True
        return len(items) >= self.limit

    def _full(self) -> bool:
        return len(self._items) >= self.limit or (
            self._weigh is not None and self.size >= self.max_bytes
        )

    async def wait_for_space(self) -> None:
        """Wait while the buffer is full (backpressure towards the broker)."""
        while self._full() and not self.closed:
            self._space = asyncio.get_running_loop().create_future()
            await self._space

    async def get(self) -> T:
        """The next item. Raises :class:`BufferClosed` (or the close error) once closed."""
        items = self._items
        while True:
            if self.closed:
                raise self._error or BufferClosed()
            if items:
                item = items.popleft()
                if self._weigh is not None:
                    self.size -= self._weigh(item)
                if items and not self._waking:
                    self._wake_one()  # more left: the next reader, in case we are held up
                space = self._space
                if space is not None and not space.done():
                    space.set_result(None)
                return item
            getter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled() and getter.exception() is None:
                    # Woken in the same instant: pass the wake on, or a message waits.
                    self._waking = False
                    if items:
                        self._wake_one()
                raise
            self._waking = False

    def take_all(self) -> list[T]:
        """Remove and return everything still buffered."""
        items = list(self._items)
        self._items.clear()
        self.size = 0
        return items

    def close(self, error: BaseException | None = None) -> None:
        """Wake every reader with :class:`BufferClosed` (or ``error``) and the writer."""
        if self.closed:
            return
        self.closed = True
        self._error = error
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_exception(error or BufferClosed())
        if self._space is not None and not self._space.done():
            self._space.set_result(None)
