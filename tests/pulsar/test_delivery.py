"""Adapter behaviour beyond the conformance suite: cancel-safety under fire, flow control,
producer reuse, size limits, and subscriptions that clean up after themselves."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pulsar
import pytest

from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_pulsar import PulsarBus, connect
from toolbus_pulsar.subscription import HIGH_WATER, PulsarSubscription

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
async def bus(pulsar_url: str) -> AsyncIterator[PulsarBus]:
    bus = await connect(pulsar_url)
    try:
        yield bus
    finally:
        await bus.close()


async def test_readers_cancelled_at_random_lose_and_duplicate_nothing(bus: PulsarBus) -> None:
    queue = fresh_queue(persistent=True)
    subscription = await bus.subscribe(queue, group="impatient")
    reader = aiter(subscription)
    total = 300
    seen: list[int] = []
    done = anyio.Event()
    chance = random.Random(5)

    async def impatient_reader() -> None:
        while True:
            # Give up on most reads after a few hundred microseconds: cancellations
            # land before, during and just after messages arrive.
            with anyio.move_on_after(chance.uniform(0, 0.001)):
                delivery = await anext(reader)
                seen.append(int(delivery.body))
                await delivery.ack()
                if len(seen) >= total:
                    done.set()

    async with anyio.create_task_group() as tasks:
        for _ in range(8):
            tasks.start_soon(impatient_reader)
        for i in range(total):
            await bus.publish(queue, str(i).encode())
        with anyio.fail_after(30):
            await done.wait()
        tasks.cancel_scope.cancel()
    assert sorted(seen) == list(range(total))


async def test_a_reader_cancelled_as_its_message_arrives_passes_it_on(
    bus: PulsarBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = fresh_queue()
    subscription = await bus.subscribe(queue)
    assert isinstance(subscription, PulsarSubscription)
    reader = aiter(subscription)
    victim: list[asyncio.Task[Any]] = []
    arrived = subscription._arrived

    def arrive_then_cancel(message: pulsar.Message) -> None:
        arrived(message)  # hands the message to the waiting reader...
        victim[0].cancel()  # ...which is cancelled before it can resume

    monkeypatch.setattr(subscription, "_arrived", arrive_then_cancel)
    victim.append(asyncio.ensure_future(anext(reader)))
    await anyio.wait_all_tasks_blocked()
    await bus.publish(queue, b"not lost")
    with pytest.raises(asyncio.CancelledError):
        await victim[0]
    monkeypatch.undo()
    delivery = await next_delivery(subscription, 10)
    assert delivery.body == b"not lost"


async def test_a_reader_that_falls_behind_pauses_the_broker_and_loses_nothing(
    pulsar_url: str,
) -> None:
    bus = await connect(pulsar_url, {"receiver_queue_size": 5})
    try:
        queue = fresh_queue(persistent=True)
        subscription = await bus.subscribe(queue, group="slow")
        assert isinstance(subscription, PulsarSubscription)
        total = 400
        for i in range(total):
            await bus.publish(queue, str(i).encode())
        got = []
        for _ in range(total):
            delivery = await next_delivery(subscription, 10)
            got.append(int(delivery.body))
            await delivery.ack()
            # Never more taken from the broker than the pause threshold, plus what
            # was on its way when the listener paused (a receiver queue's worth).
            assert subscription.queued <= HIGH_WATER + 5 + 1
        assert sorted(got) == list(range(total))
    finally:
        await bus.close()


async def test_a_producer_is_made_once_per_topic(
    bus: PulsarBus, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[str] = []
    create = pulsar.Client.create_producer

    def counting(self: pulsar.Client, topic: str, **kwargs: Any) -> pulsar.Producer:
        made.append(topic)
        return create(self, topic, **kwargs)

    monkeypatch.setattr(pulsar.Client, "create_producer", counting)
    queue = fresh_queue()
    subscription = await bus.subscribe(queue)
    async with anyio.create_task_group() as tasks:
        for i in range(50):
            tasks.start_soon(bus.publish, queue, str(i).encode(), {"id": str(i)})
    for _ in range(3):
        await bus.publish(queue, b"more")
    assert made == [f"non-persistent://conformance/q/{queue.rsplit('/', 1)[1]}"]
    await next_delivery(subscription, 10)


async def test_bodies_over_the_limit_are_refused_with_the_fix(pulsar_url: str) -> None:
    bus = await connect(pulsar_url, {"max_message_size": 1000})
    try:
        with pytest.raises(MessageTooLarge) as caught:
            await bus.publish(fresh_queue(), b"x" * 1001)
        assert caught.value.limit == 1000
        assert "max_message_size" in str(caught.value)
        await bus.publish(fresh_queue(), b"x" * 1000)
    finally:
        await bus.close()


async def test_a_body_the_broker_refuses_is_too_large_not_a_mystery(bus: PulsarBus) -> None:
    # Under our 5 MiB limit, but not once pulsar-client adds its headroom for headers.
    body = b"x" * (5 * 1024 * 1024 - 16)
    with pytest.raises(MessageTooLarge) as caught:
        await bus.publish(fresh_queue(), body)
    assert caught.value.size == len(body)


async def test_a_fan_out_subscription_on_a_persistent_topic_is_deleted_on_close(
    bus: PulsarBus, pulsar_url: str
) -> None:
    queue = fresh_queue(persistent=True)
    subscription = await bus.subscribe(queue)
    assert isinstance(subscription, PulsarSubscription)
    name = subscription.name
    assert name.startswith("toolbus-")
    await subscription.close()
    await bus.publish(queue, b"published after close")

    # Had the subscription survived, the broker would have kept that message for it.
    raw = pulsar.Client(pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        consumer = await anyio.to_thread.run_sync(lambda: raw.subscribe(queue, name))
        await bus.publish(queue, b"marker")
        message = await anyio.to_thread.run_sync(lambda: consumer.receive(10_000))
        assert message.data() == b"marker"
    finally:
        await anyio.to_thread.run_sync(raw.close)


async def test_settling_after_close_says_so(bus: PulsarBus) -> None:
    queue = fresh_queue(persistent=True)
    subscription = await bus.subscribe(queue, group=f"g-{uuid.uuid4().hex[:6]}")
    await bus.publish(queue, b"late")
    delivery = await next_delivery(subscription, 10)
    await subscription.close()
    with pytest.raises(BusClosed, match="closed"):
        await delivery.ack()


async def test_a_closed_bus_refuses_work(pulsar_url: str) -> None:
    bus = await connect(pulsar_url)
    await bus.close()
    with pytest.raises(BusClosed):
        await bus.publish(fresh_queue(), b"x")
    with pytest.raises(BusClosed):
        await bus.subscribe(fresh_queue())
