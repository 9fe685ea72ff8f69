"""What the RabbitMQ adapter puts on the broker and how it delivers, seen with plain aio-pika."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aio_pika
import aiormq.exceptions
import anyio
import pytest

from toolbus import MessageTooLarge, ToolServiceClient, running, tool_service
from toolbus.domain.calls import wire
from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_rabbitmq import RabbitMQBus, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
async def bus(rabbitmq_url: str) -> AsyncIterator[RabbitMQBus]:
    bus = await connect(rabbitmq_url)
    yield bus
    await bus.close()


@pytest.fixture
async def channel(rabbitmq_url: str) -> AsyncIterator[aio_pika.abc.AbstractChannel]:
    connection = await aio_pika.connect(rabbitmq_url)
    async with connection:
        yield await connection.channel()


async def raw_reader(
    channel: aio_pika.abc.AbstractChannel, exchange: str
) -> aio_pika.abc.AbstractQueue:
    """A queue of its own bound to ``exchange``, as any AMQP client would make it."""
    declared = await channel.declare_exchange(exchange, aio_pika.ExchangeType.FANOUT, durable=True)
    queue = await channel.declare_queue(exclusive=True)
    await queue.bind(declared)
    return queue


async def first_message(queue: aio_pika.abc.AbstractQueue) -> aio_pika.abc.AbstractIncomingMessage:
    async with queue.iterator() as messages:
        with anyio.fail_after(10):
            return await anext(aiter(messages))


@pytest.mark.parametrize(("persistent", "delivery_mode"), [(False, 1), (True, 2)])
async def test_bodies_and_properties_go_out_as_amqp_body_and_headers(
    bus: RabbitMQBus, channel: aio_pika.abc.AbstractChannel, persistent: bool, delivery_mode: int
) -> None:
    name = uuid.uuid4().hex[:10]
    queue = f"{'persistent' if persistent else 'non-persistent'}://tg/request/{name}"
    reader = await raw_reader(channel, f"tg.request.{name}")

    before = time.time_ns() // 1_000_000
    await bus.publish(queue, b'{"x": "\xc3\xbc"}', {"id": "call-1", "user": "zoë"})

    message = await first_message(reader)
    assert message.body == b'{"x": "\xc3\xbc"}'
    headers = dict(message.headers)
    if persistent:  # stamped with when it was sent, in RabbitMQ's own header for it
        assert before <= headers.pop("timestamp_in_ms") <= time.time_ns() // 1_000_000
    assert headers == {"id": "call-1", "user": "zoë"}
    assert message.delivery_mode == delivery_mode


async def test_a_plain_amqp_client_calls_a_toolbus_service(
    bus: RabbitMQBus, channel: aio_pika.abc.AbstractChannel
) -> None:
    name = uuid.uuid4().hex[:10]

    @tool_service(name)
    async def shout(text: str) -> str:
        return text.upper()

    replies = await raw_reader(channel, f"tg.response.{name}")
    requests = await channel.declare_exchange(
        f"tg.request.{name}", aio_pika.ExchangeType.FANOUT, durable=True
    )
    async with running(bus, shout):
        body = wire.encode_request("", {}, {"text": "hi"}, wire.GENERATION_2_4)
        # Headers of other types and of bytes that are not UTF-8 do not trouble it.
        headers: dict[str, Any] = {"id": "c1", "x-attempt": 2, "x-raw": bytearray(b"\xff")}
        await requests.publish(aio_pika.Message(body, headers=headers), routing_key="")
        answer = await first_message(replies)
    assert answer.headers["id"] == "c1"
    assert wire.decode_response(answer.body).response == "HI"


async def test_a_streamed_answer_keeps_its_order(bus: RabbitMQBus) -> None:
    name = uuid.uuid4().hex[:10]
    chunks = [f"<{n}>" for n in range(200)]

    @tool_service(name)
    async def count() -> AsyncIterator[str]:
        for chunk in chunks:
            yield chunk

    async with running(bus, count), ToolServiceClient(bus) as client:
        route = {"request_queue": count.request_queue, "response_queue": count.response_queue}
        streamed = [chunk async for chunk in client.stream(**route)]
    assert streamed == chunks


async def test_a_group_s_queue_keeps_requests_while_no_member_is_there(
    bus: RabbitMQBus, rabbitmq_url: str
) -> None:
    queue = fresh_queue(persistent=True)
    first = await bus.subscribe(queue, group="workers")
    await first.close()  # the durable queue stays, with no consumer
    publisher = await connect(rabbitmq_url)
    try:
        for n in range(3):
            await publisher.publish(queue, str(n).encode(), {"id": str(n)})
    finally:
        await publisher.close()

    again = await bus.subscribe(queue, group="workers")
    got = [(await next_delivery(again, 10)).body for _ in range(3)]
    assert got == [b"0", b"1", b"2"]


async def test_prefetch_bounds_what_a_member_holds_unacknowledged(rabbitmq_url: str) -> None:
    queue = fresh_queue(persistent=True)
    greedy = await connect(rabbitmq_url, {"prefetch": 3})
    other = await connect(rabbitmq_url)
    try:
        holding = await greedy.subscribe(queue, group="workers")
        for n in range(10):
            await greedy.publish(queue, str(n).encode(), {"id": str(n)})
        held = [await next_delivery(holding, 10) for _ in range(3)]  # never acked
        rest = await other.subscribe(queue, group="workers")
        taken = []
        for _ in range(7):
            delivery = await next_delivery(rest, 10)
            taken.append(delivery.body)
            await delivery.ack()
        assert sorted(taken + [d.body for d in held], key=int) == [
            str(n).encode() for n in range(10)
        ]
    finally:
        await greedy.close()
        await other.close()


async def test_quorum_queues_for_persistent_groups(
    rabbitmq_url: str, channel: aio_pika.abc.AbstractChannel
) -> None:
    queue = fresh_queue(persistent=True)
    exchange = queue.removeprefix("persistent://").replace("/", ".")
    bus = await connect(rabbitmq_url, {"queue_type": "quorum"})
    try:
        subscription = await bus.subscribe(queue, group="workers")
        await bus.publish(queue, b"again", {"id": "q1"})
        first = await next_delivery(subscription, 10)
        await first.nack()
        second = await next_delivery(subscription, 10)
        assert (second.body, second.redelivered) == (b"again", True)
        # Quorum queues count deliveries; classic queues do not.
        assert second.properties["x-delivery-count"] == "1"
        await second.ack()
    finally:
        await bus.close()
    # The group's queue is a quorum queue: declaring it classic is refused.
    with pytest.raises(aiormq.exceptions.ChannelPreconditionFailed, match="x-queue-type"):
        await channel.declare_queue(f"{exchange}.workers", durable=True)


async def test_a_body_over_the_limit_is_refused_before_it_is_sent(rabbitmq_url: str) -> None:
    bus = await connect(rabbitmq_url, {"max_message_size": 1024})
    try:
        with pytest.raises(MessageTooLarge, match="max_message_size"):
            await bus.publish(fresh_queue(), b"x" * 1025, {"id": "big"})
    finally:
        await bus.close()
