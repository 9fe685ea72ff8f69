"""Readers that take turns to fetch, as Kafka's do: nothing lost, order kept, a turn never lost.

A model subscription in the shape of the Kafka adapter's: a reader takes an
item if one is here; otherwise, if nobody fetches, it fetches (waits for a
batch the schedule hands over, then offers it); otherwise it waits to be woken,
for an item or for the turn to fetch. One leaving with an item while nothing
is left and nobody fetches passes the turn. Each random schedule also puts
items back at the front (nacks), purges some (a partition given up), and
cancels readers at any point, also in the instant they are woken or their
fetch completes.

Afterwards every item was taken at most once, in the order the buffer held it,
or is still held (or was purged, or waits in the client for the next fetch);
and no reader sits waiting in the buffer while an item does, or while nobody
fetches.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from dataclasses import dataclass, field

from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolbus._internal.delivery_buffer import DeliveryBuffer

READ, CANCEL, STEP, SETTLE = "read", "cancel", "step", "settle"
FETCHED, NACK, PURGE = "fetched", "nack", "purge"
operation = st.one_of(
    st.just((READ, 0)),
    st.tuples(st.just(CANCEL), st.integers(0, 3)),
    st.just((STEP, 0)),
    st.just((SETTLE, 0)),
    st.tuples(st.just(FETCHED), st.integers(0, 3)),
    st.just((NACK, 0)),
    st.tuples(st.just(PURGE), st.integers(0, 2)),
)
operations = st.lists(operation, max_size=40)


@dataclass
class Subscription:
    buffer: DeliveryBuffer[int] = field(default_factory=DeliveryBuffer)
    #: What the buffer must hold, in order: checked at every take.
    expected: deque[int] = field(default_factory=deque)
    produced: list[int] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)
    purged: list[int] = field(default_factory=list)
    #: The fetch under way, resolved by the schedule with a batch.
    fetch: asyncio.Future[list[int]] | None = None
    fetcher: asyncio.Task[object] | None = None
    #: A batch whose fetcher was cancelled as it arrived: the client keeps it.
    backlog: list[int] = field(default_factory=list)
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    def new_item(self) -> int:
        self.produced.append(len(self.produced))
        return self.produced[-1]

    async def read(self) -> None:
        buffer = self.buffer
        while not buffer.closed:
            item = buffer.take()
            if item is None:
                if self.fetch is None:
                    await self._fetch()
                else:
                    await buffer.woken()
                continue
            assert item == self.expected.popleft(), "taken out of order"
            self.taken.append(item)
            if not buffer and self.fetch is None:
                buffer.pass_turn()
            return

    async def _fetch(self) -> None:
        if self.backlog:
            batch, self.backlog = self.backlog, []
        else:
            fetch = self.fetch = asyncio.get_running_loop().create_future()
            self.fetcher = asyncio.current_task()
            try:
                batch = await fetch
            except asyncio.CancelledError:
                self.fetch = self.fetcher = None
                if fetch.done() and not fetch.cancelled():
                    self.backlog = fetch.result()
                self.buffer.pass_turn()
                raise
            self.fetch = self.fetcher = None
        self.expected.extend(batch)
        self.buffer.offer_many(batch)


async def settle() -> None:
    for _ in range(20):  # more turns than any hand-over here needs
        await asyncio.sleep(0)


def check(run: Subscription) -> None:
    """What must hold whenever the readers have run as far as they can."""
    held = list(run.buffer.items)
    waiting = [reader for reader in run.readers if not reader.done()]
    # The fetcher waits in the client (a nacked item waits for its next
    # batch, bounded by the fetch wait); the others wait in the buffer.
    in_buffer = [reader for reader in waiting if reader is not run.fetcher]

    assert held == list(run.expected)
    accounted = Counter(run.taken + held + run.purged + run.backlog)
    assert accounted == Counter(run.produced), "an item was lost or duplicated"
    assert not (in_buffer and held), "a reader waits while an item does"
    if waiting:
        assert run.fetch is not None, "readers wait while nobody fetches"


async def play(schedule: list[tuple[str, int]]) -> None:
    run = Subscription()
    for operation, argument in schedule:
        if operation == READ:
            run.readers.append(asyncio.create_task(run.read()))
        elif operation == CANCEL and run.readers:
            run.readers[argument % len(run.readers)].cancel()
        elif operation == FETCHED and run.fetch is not None and not run.fetch.done():
            run.fetch.set_result([run.new_item() for _ in range(argument)])
        elif operation == NACK:
            item = run.new_item()
            run.expected.appendleft(item)
            run.buffer.push_front(item)
        elif operation == PURGE:
            purged = run.buffer.purge(lambda item, residue=argument: item % 3 == residue)
            assert purged == [item for item in run.expected if item % 3 == argument]
            run.expected = deque(item for item in run.expected if item % 3 != argument)
            run.purged += purged
        elif operation == SETTLE:
            await settle()
            check(run)
        else:
            await asyncio.sleep(0)
    await settle()
    check(run)

    run.buffer.close()
    if run.fetch is not None and not run.fetch.done():
        run.fetch.set_result([])  # closing ends the client's fetch too
    await settle()
    assert all(reader.done() for reader in run.readers)


# Schedules random search rarely hits, pinned:
# the fetcher's batch wakes a reader, the fetcher takes the batch itself and
# passes the turn to that reader, which is cancelled in the same instant;
THE_TURN_OF_A_CANCELLED_READER = [(READ, 0)] * 3 + [(STEP, 0), (FETCHED, 1), (STEP, 0), (CANCEL, 1)]
# the fetcher is cancelled in the instant its batch arrives.
A_FETCHER_CANCELLED_AS_ITS_BATCH_ARRIVES = [(READ, 0)] * 2 + [(STEP, 0), (FETCHED, 2), (CANCEL, 0)]


@settings(max_examples=400, deadline=None)
@given(operations)
@example(THE_TURN_OF_A_CANCELLED_READER)
@example(A_FETCHER_CANCELLED_AS_ITS_BATCH_ARRIVES)
def test_readers_taking_turns_to_fetch_lose_nothing_and_never_all_wait(
    schedule: list[tuple[str, int]],
) -> None:
    asyncio.run(play(schedule))
