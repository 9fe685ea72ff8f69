"""Whatever readers, writers and cancellations do, a buffer loses nothing and keeps order.

Each example runs a random schedule on a real event loop: items offered,
readers started and cancelled at any point (also in the instant they are
woken), the loop run a step at a time. Afterwards every item offered was taken
exactly once, in the order offered, or is still in the buffer; and no reader
sits waiting while an item does.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer

OFFER, READ, CANCEL, STEP = "offer", "read", "cancel", "step"
operations = st.lists(
    st.one_of(
        st.just((OFFER, 0)),
        st.just((READ, 0)),
        st.tuples(st.just(CANCEL), st.integers(0, 7)),
        st.just((STEP, 0)),
    ),
    max_size=60,
)


@dataclass
class Run:
    buffer: DeliveryBuffer[int]
    offered: list[int] = field(default_factory=list)
    taken: list[int] = field(default_factory=list)
    readers: list[asyncio.Task[None]] = field(default_factory=list)

    async def read(self) -> None:
        self.taken.append(await self.buffer.get())


async def settle() -> None:
    for _ in range(10):  # more turns than any hand-over here needs
        await asyncio.sleep(0)


async def play(schedule: list[tuple[str, int]], limit: int) -> Run:
    run = Run(DeliveryBuffer(limit))
    for operation, which in schedule:
        if operation == OFFER:
            run.offered.append(len(run.offered))
            run.buffer.offer(run.offered[-1])
        elif operation == READ:
            run.readers.append(asyncio.create_task(run.read()))
        elif operation == CANCEL and run.readers:
            run.readers[which % len(run.readers)].cancel()
        else:
            await asyncio.sleep(0)
    await settle()
    return run


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(1, 4))
def test_no_item_is_lost_duplicated_or_reordered(
    schedule: list[tuple[str, int]], limit: int
) -> None:
    async def check() -> None:
        run = await play(schedule, limit)
        waiting = [reader for reader in run.readers if not reader.done()]
        left = list(run.buffer.items)

        assert run.taken + left == run.offered
        assert not (waiting and left), "a reader waits while an item does"

        run.buffer.close()
        await settle()
        for reader in waiting:
            assert reader.done() and isinstance(reader.exception(), BufferClosed)

    asyncio.run(check())


@settings(max_examples=100, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(1, 4), st.integers(0, 30))
def test_writers_held_back_by_a_full_buffer_deliver_everything_in_their_order(
    limit: int, writers: int, readers: int, items: int
) -> None:
    async def check() -> None:
        buffer: DeliveryBuffer[tuple[int, int]] = DeliveryBuffer(limit)
        taken: list[tuple[int, int]] = []
        expected = writers * items

        async def write(writer: int) -> None:
            for n in range(items):
                await buffer.put((writer, n))
                assert len(buffer) <= limit  # put never overfills

        all_taken = asyncio.Event()

        async def read() -> None:
            while True:
                try:
                    taken.append(await buffer.get())
                except BufferClosed:
                    return
                if len(taken) == expected:
                    all_taken.set()

        reading = [asyncio.create_task(read()) for _ in range(readers)]
        await asyncio.gather(*(write(w) for w in range(writers)))
        if expected:
            # Bounded only so that a lost item fails the test instead of hanging it.
            await asyncio.wait_for(all_taken.wait(), 10)
        buffer.close()
        await asyncio.gather(*reading)

        assert sorted(taken) == sorted((w, n) for w in range(writers) for n in range(items))
        for writer in range(writers):  # each writer's items arrive in its order
            mine = [n for w, n in taken if w == writer]
            assert mine == sorted(mine)

    asyncio.run(check())


def test_push_front_goes_first_and_weighs_in() -> None:
    async def check() -> None:
        buffer: DeliveryBuffer[bytes] = DeliveryBuffer(10, max_bytes=4, weigh=len)
        assert buffer.offer(b"ab") is False
        buffer.push_front(b"cd")  # a redelivery: first, and never refused for room
        assert buffer.full() and buffer.size == 4
        assert [await buffer.get(), await buffer.get()] == [b"cd", b"ab"]
        assert buffer.size == 0

    asyncio.run(check())
