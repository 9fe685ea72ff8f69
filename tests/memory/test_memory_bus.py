"""In-memory bus behaviour beyond the shared conformance suite."""

from __future__ import annotations

import asyncio
import uuid

import anyio
import pytest

from toolbus.domain.errors import BusClosed, MessageTooLarge, QueueNameError
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio


def url() -> str:
    return f"memory://unit-{uuid.uuid4().hex}"


async def test_connections_to_one_name_share_a_broker_and_other_names_do_not() -> None:
    name = url()
    a, b, elsewhere = await connect(name), await connect(name), await connect(url())
    seen_b = await b.subscribe("q")
    seen_elsewhere = await elsewhere.subscribe("q")
    await a.publish("q", b"x", {"id": "1"})
    with anyio.fail_after(1):
        async for delivery in seen_b:
            assert delivery.body == b"x"
            break
    with anyio.move_on_after(0.05) as nothing:
        async for _ in seen_elsewhere:
            raise AssertionError("a different broker name must not receive it")
    assert nothing.cancelled_caught


async def test_publisher_waits_while_a_buffer_is_full_and_resumes_when_drained() -> None:
    bus = await connect(f"{url()}?buffer_size=2")
    subscription = await bus.subscribe("q", group="g")
    await bus.publish("q", b"1")
    await bus.publish("q", b"2")
    published = anyio.Event()

    async def third() -> None:
        await bus.publish("q", b"3")
        published.set()

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(third)
        await anyio.wait_all_tasks_blocked()
        assert not published.is_set(), "a full buffer must hold the publisher back"
        reader = aiter(subscription)
        assert (await anext(reader)).body == b"1"
        with anyio.fail_after(1):
            await published.wait()
        assert [(await anext(reader)).body for _ in range(2)] == [b"2", b"3"]


async def test_too_large_a_message_is_refused_with_the_limit_and_the_fix() -> None:
    bus = await connect(f"{url()}?max_message_size=10")
    with pytest.raises(MessageTooLarge) as caught:
        await bus.publish("q", b"x" * 11)
    assert "10 bytes" in str(caught.value) and "max_message_size" in str(caught.value)


async def test_nack_on_a_non_persistent_queue_does_not_redeliver() -> None:
    bus = await connect(url())
    subscription = await bus.subscribe("non-persistent://t/n/q", group="g")
    await bus.publish("non-persistent://t/n/q", b"once")
    reader = aiter(subscription)
    first = await anext(reader)
    await first.nack()
    assert not first.redelivered
    with anyio.move_on_after(0.05) as nothing:
        await anext(reader)
    assert nothing.cancelled_caught, "at-most-once: a nacked message is gone"


async def test_a_cancelled_read_loses_nothing() -> None:
    bus = await connect(url())
    subscription = await bus.subscribe("persistent://t/n/q", group="g")
    reader = aiter(subscription)
    with anyio.move_on_after(0.01):
        await anext(reader)
    await bus.publish("persistent://t/n/q", b"kept")
    with anyio.fail_after(1):
        assert (await anext(reader)).body == b"kept"


async def test_a_group_keeps_messages_while_it_has_no_members() -> None:
    bus = await connect(url())
    first = await bus.subscribe("persistent://t/n/q", group="g")
    await first.close()
    await bus.publish("persistent://t/n/q", b"waiting")
    again = await bus.subscribe("persistent://t/n/q", group="g")
    with anyio.fail_after(1):
        assert (await anext(aiter(again))).body == b"waiting"


async def test_messages_with_no_subscriber_are_dropped_as_on_a_broker() -> None:
    bus = await connect(url())
    await bus.publish("q", b"lost")
    subscription = await bus.subscribe("q")
    await bus.publish("q", b"seen")
    with anyio.fail_after(1):
        assert (await anext(aiter(subscription))).body == b"seen"


async def test_closed_connection_refuses_work_with_a_clear_error() -> None:
    bus: MemoryBus = await connect(url())
    await bus.close()
    with pytest.raises(BusClosed):
        await bus.publish("q", b"x")
    with pytest.raises(BusClosed):
        await bus.subscribe("q")


async def test_queue_names_no_broker_could_carry_are_refused() -> None:
    bus = await connect(url())
    with pytest.raises(QueueNameError):
        await bus.subscribe("persistent://only/two")


async def test_a_non_memory_url_is_refused() -> None:
    with pytest.raises(ValueError, match="memory://"):
        await connect("nats://127.0.0.1:4222")


async def test_a_reader_that_keeps_up_takes_a_burst_without_waking_the_others() -> None:
    bus = await connect(url())
    subscription = await bus.subscribe("q", group="pool")
    reader = aiter(subscription)
    taken_by: dict[int, int] = {}
    all_taken = anyio.Event()

    async def read(me: int) -> None:
        while True:
            await anext(reader)  # and straight back for more: never held up
            taken_by[me] = taken_by.get(me, 0) + 1
            if sum(taken_by.values()) == 40:
                all_taken.set()

    readers = [asyncio.create_task(read(n)) for n in range(8)]
    await anyio.wait_all_tasks_blocked()
    for i in range(40):
        await bus.publish("q", str(i).encode())
    with anyio.fail_after(1):
        await all_taken.wait()
    for task in readers:
        task.cancel()
    # One reader is woken for the burst and takes it all; waking all eight, one
    # message each, would cost a task switch per message.
    assert list(taken_by.values()) == [40]


async def test_a_reader_held_up_by_its_message_has_woken_another_for_the_next() -> None:
    bus = await connect(url())
    subscription = await bus.subscribe("q", group="pool")
    reader = aiter(subscription)
    release = anyio.Event()
    got: list[bytes] = []
    three = anyio.Event()

    async def read() -> None:
        while True:
            got.append((await anext(reader)).body)
            if len(got) == 3:
                three.set()
            await release.wait()  # a tool awaiting I/O

    readers = [asyncio.create_task(read()) for _ in range(3)]
    await anyio.wait_all_tasks_blocked()
    for body in (b"1", b"2", b"3"):
        await bus.publish("q", body)
    with anyio.fail_after(1):
        await three.wait()
    assert got == [b"1", b"2", b"3"], "each held-up reader passed the rest on"
    release.set()
    for task in readers:
        task.cancel()


async def test_a_reader_cancelled_as_it_is_woken_passes_the_message_on() -> None:
    bus = await connect(url())
    subscription = await bus.subscribe("persistent://t/n/q", group="pool")
    reader = aiter(subscription)
    first = asyncio.create_task(anext(reader))
    await anyio.wait_all_tasks_blocked()
    second = asyncio.create_task(anext(reader))
    await anyio.wait_all_tasks_blocked()
    await bus.publish("persistent://t/n/q", b"kept")  # wakes the first reader...
    first.cancel()  # ...which is cancelled before it runs
    with anyio.fail_after(1):
        assert (await second).body == b"kept"
    assert first.cancelled()


async def test_a_member_closed_as_it_is_woken_leaves_the_message_to_the_group() -> None:
    bus = await connect(url())
    leaving = await bus.subscribe("persistent://t/n/q", group="g")
    staying = await bus.subscribe("persistent://t/n/q", group="g")
    woken = asyncio.create_task(anext(aiter(leaving)))
    await anyio.wait_all_tasks_blocked()
    other = asyncio.create_task(anext(aiter(staying)))
    await anyio.wait_all_tasks_blocked()
    await bus.publish("persistent://t/n/q", b"kept")  # wakes the leaving member's read
    await leaving.close()
    with anyio.fail_after(1):
        assert (await other).body == b"kept"
    with pytest.raises(StopAsyncIteration):
        await woken
