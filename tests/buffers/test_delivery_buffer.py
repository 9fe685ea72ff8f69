"""The buffer between a broker's callbacks and a subscription's readers (no server)."""

from __future__ import annotations

import asyncio

import pytest

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer
from toolbus.domain.errors import BusClosed

pytestmark = pytest.mark.anyio


async def test_an_item_handed_over_as_its_reader_is_cancelled_goes_back_first() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer(10)
    reader = asyncio.create_task(buffer.get())
    await asyncio.sleep(0)  # the reader now waits
    buffer.offer("handed over")  # resolves the reader's future...
    reader.cancel()  # ...and the reader is cancelled before it could run
    with pytest.raises(asyncio.CancelledError):
        await reader
    buffer.offer("later")
    assert [await buffer.get(), await buffer.get()] == ["handed over", "later"]


async def test_a_full_buffer_holds_the_writer_back_until_a_read() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(2)
    assert buffer.offer(1) is False
    assert buffer.offer(2) is True  # now full
    writer = asyncio.create_task(buffer.wait_for_space())
    await asyncio.sleep(0)
    assert not writer.done()
    assert await buffer.get() == 1
    await asyncio.wait_for(writer, 1)


async def test_closing_wakes_every_reader_with_the_reason() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(2)
    readers = [asyncio.create_task(buffer.get()) for _ in range(3)]
    await asyncio.sleep(0)
    buffer.close(BusClosed("gone"))
    for reader in readers:
        with pytest.raises(BusClosed, match="gone"):
            await reader
    with pytest.raises(BusClosed):
        await buffer.get()


async def test_closing_without_a_reason_ends_reads_quietly() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(2)
    buffer.offer(1)
    buffer.close()
    with pytest.raises(BufferClosed):
        await buffer.get()
    assert buffer.take_all() == [1]


async def test_a_buffer_that_weighs_its_items_is_also_full_by_bytes() -> None:
    buffer: DeliveryBuffer[bytes] = DeliveryBuffer(100, max_bytes=5, weigh=len)
    assert buffer.offer(b"abc") is False
    assert buffer.offer(b"de") is True  # 5 bytes: full, though only 2 items
    writer = asyncio.create_task(buffer.wait_for_space())
    await asyncio.sleep(0)
    assert not writer.done()
    assert await buffer.get() == b"abc"
    await asyncio.wait_for(writer, 1)
    assert buffer.size == 2


async def test_a_reader_that_keeps_up_takes_a_burst_without_waking_the_others() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(100)
    taken_by: dict[int, int] = {}
    all_taken = asyncio.Event()

    async def read(me: int) -> None:
        while True:
            await buffer.get()  # and straight back for more: never held up
            taken_by[me] = taken_by.get(me, 0) + 1
            if sum(taken_by.values()) == 40:
                all_taken.set()

    readers = [asyncio.create_task(read(n)) for n in range(8)]
    await asyncio.sleep(0)  # every reader now waits
    for i in range(40):
        buffer.offer(i)
    await asyncio.wait_for(all_taken.wait(), 1)
    for task in readers:
        task.cancel()
    # One reader is woken for the burst and takes it all; waking all eight, one
    # message each, would cost a task switch per message.
    assert list(taken_by.values()) == [40]


async def test_a_reader_held_up_by_its_item_has_woken_another_for_the_next() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(100)
    release = asyncio.Event()
    got: list[int] = []
    three = asyncio.Event()

    async def read() -> None:
        while True:
            got.append(await buffer.get())
            if len(got) == 3:
                three.set()
            await release.wait()  # a tool awaiting I/O

    readers = [asyncio.create_task(read()) for _ in range(3)]
    await asyncio.sleep(0)
    for i in range(3):
        buffer.offer(i)
    await asyncio.wait_for(three.wait(), 1)
    assert got == [0, 1, 2]
    release.set()
    for task in readers:
        task.cancel()


async def test_a_reader_cancelled_as_it_is_woken_passes_the_item_to_another() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer(10)
    first = asyncio.create_task(buffer.get())
    await asyncio.sleep(0)  # the first reader now waits...
    second = asyncio.create_task(buffer.get())
    await asyncio.sleep(0)  # ...and the second behind it
    buffer.offer("kept")  # wakes the first reader...
    first.cancel()  # ...which is cancelled before it could run
    assert await asyncio.wait_for(second, 1) == "kept"
    assert first.cancelled()


async def test_a_turn_wakes_a_reader_with_nothing_to_take() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer()
    reader = asyncio.create_task(buffer.woken())
    await asyncio.sleep(0)  # the reader now waits
    buffer.pass_turn()
    await asyncio.wait_for(reader, 1)
    assert buffer.take() is None


async def test_a_turn_passed_as_its_reader_is_cancelled_goes_to_the_next_reader() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer()
    first = asyncio.create_task(buffer.woken())
    await asyncio.sleep(0)
    second = asyncio.create_task(buffer.woken())
    await asyncio.sleep(0)
    buffer.pass_turn()  # wakes the first reader...
    first.cancel()  # ...which is cancelled before it could run
    await asyncio.wait_for(second, 1)
    assert first.cancelled()


async def test_a_turn_passed_while_a_reader_is_on_its_way_goes_to_that_reader() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer()
    readers = [asyncio.create_task(buffer.woken()) for _ in range(3)]
    await asyncio.sleep(0)
    buffer.offer("item")  # wakes the first reader...
    assert buffer.take() == "item"  # ...whose item someone else takes meanwhile
    buffer.pass_turn()  # the first reader, already woken, takes the turn instead
    readers[0].cancel()  # and, cancelled, passes it on: to the second, not both
    await asyncio.wait_for(readers[1], 1)
    await asyncio.sleep(0)
    assert not readers[2].done()
    readers[2].cancel()


async def test_a_turn_with_nobody_waiting_is_not_kept_for_later() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer()
    buffer.pass_turn()
    reader = asyncio.create_task(buffer.woken())
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not reader.done()  # whoever comes later sees for itself that nobody fetches
    reader.cancel()


async def test_a_batch_fans_out_to_the_waiting_readers_in_one_turn_and_in_order() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(3)
    assert buffer.offer_many([]) is False
    readers = [asyncio.create_task(buffer.get()) for _ in range(2)]
    await asyncio.sleep(0)  # both readers now wait
    assert buffer.offer_many(iter([1, 2, 3])) is True  # full now: three items
    await asyncio.sleep(0)  # one turn of the loop: both readers have run
    assert [reader.done() for reader in readers] == [True, True]
    assert [reader.result() for reader in readers] == [1, 2]
    assert buffer.take() == 3


async def test_purging_drops_what_is_picked_keeps_the_order_and_makes_room() -> None:
    buffer: DeliveryBuffer[bytes] = DeliveryBuffer(4, max_bytes=6, weigh=len)
    assert buffer.offer_many([b"a", b"bb", b"c", b"dd"]) is True
    writer = asyncio.create_task(buffer.put(b"e"))
    await asyncio.sleep(0)
    assert not writer.done()
    assert buffer.purge(lambda item: len(item) == 2) == [b"bb", b"dd"]
    assert buffer.size == 2
    await asyncio.wait_for(writer, 1)
    assert buffer.take_all() == [b"a", b"c", b"e"]
    assert buffer.purge(lambda item: True) == []


async def test_a_reader_between_waits_learns_of_the_close_and_its_error() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer()
    reader = asyncio.create_task(buffer.woken())
    await asyncio.sleep(0)
    failure = BusClosed("the broker went away")
    buffer.close(failure)
    await asyncio.wait_for(reader, 1)  # woken, not failed: it looks at the buffer
    assert buffer.closed and buffer.error is failure
    await asyncio.wait_for(buffer.woken(), 1)  # returns at once once closed
    with pytest.raises(BusClosed, match="went away"):
        await buffer.get()


async def test_a_buffer_closed_without_an_error_has_none() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer()
    buffer.close()
    assert buffer.error is None
