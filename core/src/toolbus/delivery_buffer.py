"""A bounded FIFO between whatever receives messages and a subscription's readers.

Any number of tasks may read one subscription at once (a service host's worker
pool), so every adapter that buffers deliveries needs the same subtle thing;
this is it, shared by the in-memory bus and the NATS adapter.

* **Wake one.** Waiting readers are woken one at a time: the woken reader takes
  an item when it runs and, if more are left, wakes the next. A reader that
  keeps up takes a burst in one turn of the event loop, instead of every idle
  reader being scheduled for one item each; one held up by its item (a tool
  awaiting I/O) has already woken the next, so a slow item never holds up the
  rest.
* **Cancel-safe.** A reader cancelled (or whose subscription closed) just after
  being woken passes the wake on, so no item waits while a reader is idle.
* **Bounded.** Full at ``limit`` items or, given a way to weigh them, at
  ``max_bytes``: writers then wait (:meth:`put`, :meth:`wait_for_space`) and the
  broker's own flow control takes over. Redeliveries (:meth:`push_front`) go
  first and never wait for room.
* **Closing** wakes every reader with :class:`BufferClosed`, or the error given,
  and every waiting writer.

:meth:`get` is the whole read. A subscription whose readers must also stop
when *it* closes, while the buffer lives on for others (members of one group
share a buffer), reads with the parts instead: :meth:`take`, :meth:`wait`,
:meth:`woke` and :meth:`pass_wake`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class BufferClosed(Exception):
    """Raised to readers of a buffer that was closed without an error."""


class DeliveryBuffer(Generic[T]):
    """A bounded FIFO with any number of readers and writers."""

    __slots__ = (
        "_error",
        "_getters",
        "_loop",
        "_putters",
        "_waking",
        "_weigh",
        "closed",
        "items",
        "limit",
        "max_bytes",
        "size",
    )

    def __init__(
        self,
        limit: int,
        max_bytes: int = 0,
        weigh: Callable[[T], int] | None = None,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        #: The items held, oldest first: read it; change it only through the methods.
        self.items: deque[T] = deque()
        #: Readers waiting; each future is set (to None) to wake one.
        self._getters: deque[asyncio.Future[None]] = deque()
        #: Writers waiting for room.
        self._putters: deque[asyncio.Future[None]] = deque()
        #: A reader has been woken and has not run yet.
        self._waking = False
        # Given when known: each get_running_loop() asks the OS for the pid.
        self._loop = loop
        self._error: BaseException | None = None
        self._weigh = weigh if max_bytes > 0 else None
        self.limit = limit
        self.max_bytes = max_bytes
        #: Bytes held (0 unless the buffer weighs its items).
        self.size = 0
        self.closed = False

    def __len__(self) -> int:
        return len(self.items)

    def _future(self) -> asyncio.Future[None]:
        return (self._loop or asyncio.get_running_loop()).create_future()

    # -- writing ------------------------------------------------------------------

    def _wake_one(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.popleft()
            if not getter.done():
                getter.set_result(None)
                self._waking = True
                return

    def offer(self, item: T) -> bool:
        """Keep ``item`` and make sure a reader is on its way; True when the buffer is now full.

        It never waits: a writer that must respect the bound calls :meth:`put`,
        or :meth:`wait_for_space` when this returns True.
        """
        items = self.items
        items.append(item)
        if not self._waking:
            self._wake_one()
        if self._weigh is not None:
            self.size += self._weigh(item)
            if self.size >= self.max_bytes:
                return True
        return len(items) >= self.limit

    def push_front(self, item: T) -> None:
        """Put ``item`` ahead of everything else (a redelivery); it never waits for room."""
        self.items.appendleft(item)
        if self._weigh is not None:
            self.size += self._weigh(item)
        if not self._waking:
            self._wake_one()

    def full(self) -> bool:
        return len(self.items) >= self.limit or (
            self._weigh is not None and self.size >= self.max_bytes
        )

    async def wait_for_space(self) -> None:
        """Wait while the buffer is full (backpressure towards the broker) and open."""
        while self.full() and not self.closed:
            putter = self._future()
            self._putters.append(putter)
            try:
                await putter
            finally:
                if not putter.done():
                    putter.cancel()

    async def put(self, item: T) -> None:
        """Wait for room, then :meth:`offer` ``item``."""
        if self.full():
            await self.wait_for_space()
        self.offer(item)

    def _wake_putter(self) -> None:
        putters = self._putters
        while putters:
            putter = putters.popleft()
            if not putter.done():
                putter.set_result(None)
                return

    # -- reading ------------------------------------------------------------------

    def take(self) -> T | None:
        """The next item if one is here, making room for a waiting writer; never waits."""
        items = self.items
        if not items:
            return None
        item = items.popleft()
        if self._weigh is not None:
            self.size -= self._weigh(item)
        if items and not self._waking:
            self._wake_one()  # more left: the next reader, in case we are held up
        if self._putters:
            self._wake_putter()
        return item

    def wait(self) -> asyncio.Future[None]:
        """A place in the queue of readers waiting to be woken (await it, then :meth:`woke`)."""
        getter = self._future()
        self._getters.append(getter)
        return getter

    def woke(self) -> None:
        """A woken reader is running (it takes an item next, if one is left)."""
        self._waking = False

    def pass_wake(self) -> None:
        """A woken reader leaves without taking: wake another if anything is left."""
        self._waking = False
        if self.items:
            self._wake_one()

    async def get(self) -> T:
        """The next item. Raises :class:`BufferClosed` (or the close error) once closed."""
        while True:
            if self.closed:
                raise self._error or BufferClosed()
            item = self.take()
            if item is not None:
                return item
            getter = self.wait()
            try:
                await getter
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled() and getter.exception() is None:
                    self.pass_wake()  # woken in the same instant: the wake is not lost
                raise
            self.woke()

    def take_all(self) -> list[T]:
        """Remove and return everything still buffered."""
        items = list(self.items)
        self.items.clear()
        self.size = 0
        while self._putters:
            self._wake_putter()
        return items

    def close(self, error: BaseException | None = None) -> None:
        """Wake every reader with :class:`BufferClosed` (or ``error``), and every writer."""
        if self.closed:
            return
        self.closed = True
        self._error = error
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_exception(error or BufferClosed())
        while self._putters:
            self._wake_putter()
