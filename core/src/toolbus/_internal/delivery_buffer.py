"""A FIFO between whatever receives messages and a subscription's readers.

Any number of tasks may read one subscription at once (a service host's worker
pool), so every adapter that buffers deliveries needs the same subtle thing;
this is it, shared by every broker adapter and the in-memory bus.

* **Wake one.** Waiting readers are woken one at a time: the woken reader takes
  an item when it runs and, if more are left, wakes the next. A reader that
  keeps up takes a burst in one turn of the event loop, instead of every idle
  reader being scheduled for one item each; one held up by its item (a tool
  awaiting I/O) has already woken the next, so a slow item never holds up the
  rest. A batch that arrives at once (:meth:`offer_many`) wakes a reader for
  each item instead, as many as wait: it fans out in one turn.
* **Cancel-safe.** A reader cancelled (or whose subscription closed) just after
  being woken passes the wake on, so no item waits while a reader is idle.
* **Turns.** Where readers fetch for themselves (Kafka: one reader at a time
  waits in the client's fetch), a reader can be woken with nothing to take, to
  fetch for the others: :meth:`pass_turn`. A turn is passed on like any wake.
* **Bounded, if asked.** Full at ``limit`` items or, given a way to weigh them,
  at ``max_bytes``: writers then wait (:meth:`put`, :meth:`wait_for_space`) or,
  never waiting, learn it from :meth:`offer` and pause the broker's flow. A
  reader sees what is left with ``len()`` (to resume a paused flow, say).
  Redeliveries (:meth:`push_front`) go first and never wait for room.
* **Taken at once, if a reader can.** A reader may stand by to take items in
  the writer's own call (:meth:`stand_by`): an item offered while nothing is
  held goes to the first of them that accepts it, and is never held. A service
  host answers that way where the interpreter can run a task's first step at
  once (Python 3.12's eager tasks), saving both task switches of a round trip.
* **Closing** wakes every reader, with :class:`BufferClosed` or the error given
  for :meth:`get`, and every waiting writer. **Finishing** (:meth:`finish`) closes
  it once readers have taken what is left: a subscription that stopped taking
  messages from its broker hands over what it already has, then ends.

:meth:`get` is the whole read. A subscription that must do more between waits
reads with the parts instead: :meth:`take` and :meth:`woken` (it fetches when
woken with nothing to take, say), or :meth:`take`, :meth:`wait`, :meth:`woke`
and :meth:`pass_wake` when its readers must also stop when *it* closes while
the buffer lives on for others (members of one group share a buffer).
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

T = TypeVar("T")

#: The default ``limit``: no bound on the number of items.
UNBOUNDED = sys.maxsize


class BufferClosed(Exception):
    """Raised to readers of a buffer that was closed without an error."""


class DeliveryBuffer(Generic[T]):
    """A FIFO with any number of readers and writers, bounded if asked."""

    __slots__ = (
        "_error",
        "_getters",
        "_loop",
        "_putters",
        "_standing_by",
        "_turn",
        "_waking",
        "_weigh",
        "closed",
        "finishing",
        "items",
        "limit",
        "max_bytes",
        "size",
    )

    def __init__(
        self,
        limit: int = UNBOUNDED,
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
        #: The reader woken last has not run yet: one is on its way.
        self._waking = False
        #: ... and it is to take the turn (see pass_turn), even with nothing to take.
        self._turn = False
        # Given when known: each get_running_loop() asks the OS for the pid.
        self._loop = loop
        self._error: BaseException | None = None
        #: Readers standing by to take an item in the writer's call (see stand_by).
        self._standing_by: list[Callable[[T], bool]] = []
        self._weigh = weigh if max_bytes > 0 else None
        self.limit = limit
        self.max_bytes = max_bytes
        #: Bytes held (0 unless the buffer weighs its items).
        self.size = 0
        self.closed = False
        #: No more items will come (:meth:`finish`): closed when the last is taken.
        self.finishing = False

    def __len__(self) -> int:
        return len(self.items)

    @property
    def error(self) -> BaseException | None:
        """What the buffer was closed with, when it was closed by a failure."""
        return self._error

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
        if self._standing_by and not items and self._taken_at_once(item):
            return False
        items.append(item)
        if not self._waking:
            self._wake_one()
        if self._weigh is not None:
            self.size += self._weigh(item)
            if self.size >= self.max_bytes:
                return True
        return len(items) >= self.limit

    def _taken_at_once(self, item: T) -> bool:
        standing_by = self._standing_by
        for index, take in enumerate(standing_by):
            if take(item):
                if len(standing_by) > 1:  # the next item goes to the next one first
                    standing_by.append(standing_by.pop(index))
                return True
        return False

    def stand_by(self, take: Callable[[T], bool]) -> None:
        """Offer ``take`` each item written while the buffer holds nothing, in the writer's call.

        ``take`` returns True when it took the item (it must not raise, nor
        wait: it runs inside the writer's call), False to leave it to be held
        for the readers as usual. Items written while others are held are held
        too, so that order is kept. Several readers may stand by (members of
        one group sharing a buffer): they are asked in turn.
        """
        self._standing_by.append(take)

    def stand_down(self, take: Callable[[T], bool]) -> None:
        """``take`` is no longer offered items."""
        if take in self._standing_by:
            self._standing_by.remove(take)

    def offer_many(self, items: Iterable[T]) -> bool:
        """Keep a batch, in order, and wake a reader for each item; True when now full.

        A fetched batch is there at once, so no reader can keep up with its
        arrival: waking readers one after another, one per turn of the event
        loop, would only put off the last ones (Kafka's service throughput
        measured 5-10% lower that way).
        """
        batch = items if isinstance(items, list) else list(items)
        if batch:
            self.items.extend(batch)
            if self._weigh is not None:
                self.size += sum(map(self._weigh, batch))
            getters = self._getters
            for _ in batch:
                if not getters:
                    break
                # Any reader woken sets _waking; whichever runs first clears it
                # while others may still be on their way, which can only cost a
                # spare wake later, never a missed one.
                self._wake_one()
        return self.full()

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
        if not items and self.finishing:
            self.close()  # the last one: every other reader ends
        elif items and not self._waking:
            self._wake_one()  # more left: the next reader, in case we are held up
        if self._putters:
            self._wake_putter()
        return item

    def purge(self, unwanted: Callable[[T], bool]) -> list[T]:
        """Remove and return the items ``unwanted`` picks; the rest keep their order.

        For deliveries that must no longer be handed out (their partition went
        to another consumer, say). Makes room for waiting writers.
        """
        kept: list[T] = []
        removed: list[T] = []
        for item in self.items:
            (removed if unwanted(item) else kept).append(item)
        if not removed:
            return removed
        self.items.clear()
        self.items.extend(kept)
        if self._weigh is not None:
            self.size -= sum(map(self._weigh, removed))
        if not self.full():
            while self._putters:  # each looks again whether there is room for it
                self._wake_putter()
        return removed

    def wait(self) -> asyncio.Future[None]:
        """A place in the queue of readers waiting to be woken (await it, then :meth:`woke`)."""
        getter = self._future()
        self._getters.append(getter)
        return getter

    def woke(self) -> None:
        """A woken reader is running (it takes an item, or the turn, next)."""
        self._waking = False
        self._turn = False

    def pass_wake(self) -> None:
        """A woken reader leaves without taking: wake another if anything (or the turn) is left."""
        self._waking = False
        if self.items or self._turn:
            self._wake_one()
            self._turn = self._turn and self._waking

    def pass_turn(self) -> None:
        """Wake a waiting reader even with nothing to take: it is to act for the others.

        Kafka's readers take turns to fetch: one leaving with an item while others
        wait and nobody fetches passes them the turn. A reader already woken and
        not yet running takes the turn instead; with no reader waiting, nothing
        happens (the next reader to come finds nobody fetching).
        """
        if self._waking:
            self._turn = True
        else:
            self._wake_one()
            self._turn = self._waking

    async def woken(self) -> None:
        """Wait until woken: for an item to :meth:`take`, for the turn, or by :meth:`close`.

        Returns at once if the buffer is closed; look at :attr:`closed` after.
        Cancel-safe: a wake that arrives in the instant its reader is cancelled
        goes to the next reader, with the turn if it carried one.
        """
        if self.closed:
            return
        getter = self.wait()
        try:
            await getter
        except asyncio.CancelledError:
            if getter.done() and not getter.cancelled():
                self.pass_wake()  # woken in the same instant: the wake is not lost
            raise
        self.woke()

    async def get(self) -> T:
        """The next item. Raises :class:`BufferClosed` (or the close error) once closed."""
        while True:
            if self.closed:
                raise self._error or BufferClosed()
            item = self.take()
            if item is not None:
                return item
            # woken(), written out: one coroutine less per wait on the hot path.
            getter = self.wait()
            try:
                await getter
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled():
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

    def finish(self) -> None:
        """Nothing more will be offered: readers take what is left, then it is closed."""
        self.finishing = True
        if not self.items:
            self.close()

    def close(self, error: BaseException | None = None) -> None:
        """Wake all readers and writers; :meth:`get` then raises ``error`` or :class:`BufferClosed`.

        Items still held stay (:meth:`take_all` drops them); readers that use
        the parts look at :attr:`closed` when woken.
        """
        if self.closed:
            return
        self.closed = True
        self._error = error
        self._standing_by.clear()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
        while self._putters:
            self._wake_putter()
