"""The hand-over buffer between nats-py callbacks and subscription readers (no server)."""

from __future__ import annotations

import asyncio

import pytest

from toolbus.domain.errors import BusClosed
from toolbus_nats.buffer import BufferClosed, DeliveryBuffer

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
