"""Kafka-specific delivery behaviour, beyond the conformance suite, on a Tansu broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from toolbus import plugins
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus.ports import Bus, Delivery, Subscription
from toolbus_kafka import KafkaBus, KafkaUnavailable, connect
from toolbus_kafka.subscription import FanoutSubscription

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

Connect = Callable[[], Awaitable[Bus]]
WAIT = 15.0


def fresh(persistent: bool = True) -> tuple[str, str]:
    """A new queue and its Kafka topic."""
    name = uuid.uuid4().hex[:12]
    scheme = "persistent" if persistent else "non-persistent"
    return f"{scheme}://kafka/delivery/{name}", f"kafka.delivery.{name}"


async def take(subscription: Subscription, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    with anyio.fail_after(WAIT):
        async for delivery in subscription:
            got.append(delivery)
            if len(got) == count:
                break
    return got


async def nothing_more(subscription: Subscription, seconds: float = 0.5) -> None:
    with anyio.move_on_after(seconds):
        async for delivery in subscription:
            raise AssertionError(f"unexpected delivery {delivery.body!r}")


@pytest.fixture
async def open_bus(kafka_url: str) -> AsyncIterator[Connect]:
    buses: list[Bus] = []

    async def opener() -> Bus:
        bus = await connect(kafka_url)
        buses.append(bus)
        return bus

    yield opener
    for bus in buses:
        await bus.close()


async def test_the_plugin_registry_finds_the_adapter(kafka_url: str) -> None:
    bus = await plugins.connect(kafka_url)
    try:
        assert isinstance(bus, KafkaBus)
    finally:
        await bus.close()


async def test_an_unreachable_broker_is_named_in_the_error() -> None:
    with pytest.raises(KafkaUnavailable, match=r"127\.0\.0\.1:9"):
        await connect("kafka://127.0.0.1:9?request_timeout_ms=2000")


async def test_properties_are_kafka_headers_both_ways(
    open_bus: Connect, kafka_address: str
) -> None:
    bus = await open_bus()
    queue, topic = fresh(persistent=False)
    subscription = await bus.subscribe(queue)
    raw = AIOKafkaConsumer(bootstrap_servers=kafka_address, enable_auto_commit=False)
    await raw.start()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_address, enable_idempotence=False)
    await producer.start()
    try:
        await raw.topics()  # fetches the metadata: how many partitions the topic has
        partitions = [TopicPartition(topic, p) for p in raw.partitions_for_topic(topic) or ()]
        assert partitions
        raw.assign(partitions)
        await raw.seek_to_end(*partitions)
        await bus.publish(queue, b"from toolbus", {"id": "c-1", "note": "naïve"})
        record = await asyncio.wait_for(raw.getone(), WAIT)
        assert record.value == b"from toolbus"
        assert dict(record.headers) == {"id": b"c-1", "note": "naïve".encode()}
        await producer.send_and_wait(
            topic, b"from aiokafka", headers=[("id", b"c-2"), ("bad", b"\xff")]
        )
    finally:
        await raw.stop()
        await producer.stop()
    # The two records may sit on different partitions, so they may come in either order.
    got = {delivery.body: delivery for delivery in await take(subscription, 2)}
    assert set(got) == {b"from toolbus", b"from aiokafka"}
    # Headers that are not UTF-8 never break a subscriber.
    assert got[b"from aiokafka"].properties == {"id": "c-2", "bad": "\ufffd"}


async def test_messages_with_one_id_keep_their_order(open_bus: Connect) -> None:
    bus = await open_bus()
    queue, _ = fresh(persistent=False)
    subscription = await bus.subscribe(queue)
    for i in range(30):
        await bus.publish(queue, str(i).encode(), {"id": "stream-1"})
    got = await take(subscription, 30)
    assert [d.body.decode() for d in got] == [str(i) for i in range(30)]


async def test_a_new_group_is_live_before_subscribe_returns(open_bus: Connect) -> None:
    bus = await open_bus()
    queue, _ = fresh()
    await bus.publish(queue, b"before", {"id": "0"})  # nobody subscribed: not for us
    subscription = await bus.subscribe(queue, group=f"g-{uuid.uuid4().hex[:8]}")
    for i in range(1, 9):
        await bus.publish(queue, b"after", {"id": str(i)})
    got = await take(subscription, 8)
    assert {d.properties["id"] for d in got} == {str(i) for i in range(1, 9)}


async def test_only_acked_records_are_committed_even_out_of_order(open_bus: Connect) -> None:
    queue, _ = fresh()
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = await (await open_bus()).subscribe(queue, group=group)
    publisher = await open_bus()
    # One id: one partition, so the three records follow each other there.
    for n in (1, 2, 3):
        await publisher.publish(queue, str(n).encode(), {"id": "same"})
    one, two, three = await take(first, 3)
    await one.ack()
    await three.ack()  # two is still "in flight"
    await first.close()
    second = await (await open_bus()).subscribe(queue, group=group)
    again = await take(second, 2)
    # Two comes back (it was never acked); three with it, since Kafka commits one
    # offset per partition; one does not.
    assert [d.body for d in again] == [b"2", b"3"]
    assert two.body == b"2"


async def test_non_persistent_groups_commit_on_receipt(open_bus: Connect) -> None:
    queue, _ = fresh(persistent=False)
    group = f"g-{uuid.uuid4().hex[:8]}"
    first = await (await open_bus()).subscribe(queue, group=group)
    publisher = await open_bus()
    await publisher.publish(queue, b"once", {"id": "x"})
    (received,) = await take(first, 1)
    await received.nack()  # a no-op: at-most-once
    await first.close()
    second = await (await open_bus()).subscribe(queue, group=group)
    await publisher.publish(queue, b"next", {"id": "x"})
    (only,) = await take(second, 1)
    assert only.body == b"next"


async def test_a_nacked_delivery_comes_back_before_newer_ones(open_bus: Connect) -> None:
    bus = await open_bus()
    queue, _ = fresh()
    subscription = await bus.subscribe(queue, group=f"g-{uuid.uuid4().hex[:8]}")
    for n in (1, 2, 3):
        await bus.publish(queue, str(n).encode(), {"id": "same"})
    (one,) = await take(subscription, 1)
    await one.nack()
    again = await take(subscription, 3)
    assert [(d.body, d.redelivered) for d in again] == [(b"1", True), (b"2", False), (b"3", False)]


async def test_a_cancelled_read_loses_nothing(open_bus: Connect) -> None:
    bus = await open_bus()
    queue, _ = fresh(persistent=False)
    subscription = await bus.subscribe(queue)
    with anyio.move_on_after(0.2):
        async for _ in subscription:
            raise AssertionError("nothing was published yet")
    await bus.publish(queue, b"kept", {"id": "k"})
    (delivery,) = await take(subscription, 1)
    assert delivery.body == b"kept"


async def test_too_large_a_body_is_refused_before_sending(kafka_url: str) -> None:
    bus = await connect(kafka_url, {"max_message_size": 1000})
    try:
        assert bus.max_message_size == 1000
        queue, _ = fresh(persistent=False)
        with pytest.raises(MessageTooLarge, match="max_message_size"):
            await bus.publish(queue, b"x" * 1001)
        await bus.publish(queue, b"x" * 1000)
    finally:
        await bus.close()


async def test_a_closed_bus_refuses_work(kafka_url: str) -> None:
    bus = await connect(kafka_url)
    queue, _ = fresh(persistent=False)
    subscription = await bus.subscribe(queue)
    await bus.close()
    with pytest.raises(BusClosed):
        await bus.publish(queue, b"late")
    with pytest.raises(BusClosed):
        await bus.subscribe(queue)
    await nothing_more(subscription, 0.1)


@pytest.mark.slow
@pytest.mark.parametrize("group", [None, "g"], ids=["fan-out", "group"])
async def test_records_from_many_producers_at_once_all_arrive(
    open_bus: Connect, group: str | None
) -> None:
    # Tansu hands out a batch's offsets before it stores the batch: a fetch in
    # between sees the next producer's batch first. The reader must not move past
    # the hole (a client would never see that answer, a group would commit past
    # those requests).
    producers, per_producer, at_once = 6, 1000, 20
    reader = await open_bus()
    queue, _ = fresh()
    subscription = await reader.subscribe(queue, group=group and f"g-{uuid.uuid4().hex[:8]}")
    buses = [await open_bus() for _ in range(producers)]
    expected = {f"{p}-{k}" for p in range(producers) for k in range(per_producer)}

    async def produce(p: int) -> None:
        # One id: one partition for every producer.
        async def send(k: int) -> None:
            await buses[p].publish(queue, f"{p}-{k}".encode(), {"id": "one"})

        for first in range(0, per_producer, at_once):
            async with anyio.create_task_group() as sending:
                for k in range(first, first + at_once):
                    sending.start_soon(send, k)

    seen: set[str] = set()

    async def read() -> None:
        async for delivery in subscription:
            seen.add(delivery.body.decode())
            await delivery.ack()
            if seen >= expected:
                return

    async with anyio.create_task_group() as load:
        for p in range(producers):
            load.start_soon(produce, p)
        with anyio.move_on_after(WAIT):
            await read()
    missing = expected - seen
    assert not missing, f"{len(missing)} records never arrived, such as {sorted(missing)[:5]}"


async def test_a_reader_reads_again_from_a_hole_instead_of_moving_past_it(
    open_bus: Connect,
) -> None:
    # A hole no broker makes on purpose: the reader is told it has read only
    # offsets 0-1 of 0-4, as if 2-4 had been handed out but not stored when it
    # fetched. The next record it sees (5) is past the hole.
    bus = await open_bus()
    queue, topic = fresh(persistent=False)
    subscription = await bus.subscribe(queue)
    for i in range(5):
        await bus.publish(queue, str(i).encode(), {"id": "one"})
    assert [d.body for d in await take(subscription, 5)] == [b"0", b"1", b"2", b"3", b"4"]
    assert isinstance(subscription, FanoutSubscription)
    subscription._next_offsets[TopicPartition(topic, 0)] = 2
    await bus.publish(queue, b"5", {"id": "one"})
    assert [d.body for d in await take(subscription, 4)] == [b"2", b"3", b"4", b"5"]
