"""Topics are created with toolbus's partition count before use, or fail clearly."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from toolbus_kafka import KafkaTopicError, connect, parse_options
from toolbus_kafka.provisioning import TopicManager

TOPIC_ALREADY_EXISTS = 36
TOPIC_AUTHORIZATION_FAILED = 29
POLICY_VIOLATION = 44


@dataclass
class FakeAdmin:
    """Answers like a broker that refuses (or has already got) the topic."""

    error_code: int
    existing: dict[str, int] = field(default_factory=dict)
    created: list[NewTopic] = field(default_factory=list)

    async def create_topics(self, new_topics: list[NewTopic]) -> Any:
        self.created.extend(new_topics)
        errors = [(t.name, self.error_code, "refused by policy") for t in new_topics]
        return SimpleNamespace(topic_errors=errors)

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]:
        return [
            {"topic": t, "error_code": 0, "partitions": [{}] * self.existing[t]}
            if t in self.existing
            else {"topic": t, "error_code": 3, "partitions": []}
            for t in topics
        ]


@pytest.mark.anyio
async def test_a_topic_that_cannot_be_created_gives_a_clear_error() -> None:
    admin = FakeAdmin(POLICY_VIOLATION)
    topics = TopicManager(admin, parse_options("kafka://k1"))
    with pytest.raises(KafkaTopicError) as caught:
        await topics.ensure("tg.request.joke")
    text = str(caught.value)
    assert "'tg.request.joke'" in text
    assert "PolicyViolationError" in text and "refused by policy" in text
    assert "--partitions" in text  # says how to fix it


@pytest.mark.anyio
async def test_topics_are_created_with_the_configured_partitions_and_size() -> None:
    admin = FakeAdmin(0)
    options = parse_options("kafka://k1?partitions=6&replication_factor=3")
    assert await TopicManager(admin, options).ensure("a.b.c") == 6
    (request,) = admin.created
    assert (request.num_partitions, request.replication_factor) == (6, 3)
    assert request.topic_configs["max.message.bytes"] == str(options.max_message_size)


@pytest.mark.anyio
@pytest.mark.parametrize("code", [TOPIC_ALREADY_EXISTS, TOPIC_AUTHORIZATION_FAILED])
async def test_an_existing_topic_is_used_with_its_own_partition_count(code: int) -> None:
    admin = FakeAdmin(code, existing={"a.b.c": 12})
    topics = TopicManager(admin, parse_options("kafka://k1"))
    assert await topics.ensure("a.b.c") == 12
    assert await topics.ensure("a.b.c") == 12
    assert len(admin.created) == 1  # remembered, not asked again


@pytest.mark.anyio
@pytest.mark.broker
async def test_a_queue_gets_a_topic_with_the_configured_partitions_on_the_broker(
    kafka_address: str, kafka_url: str
) -> None:
    suffix = uuid.uuid4().hex[:10]
    queue = f"non-persistent://topics/made/{suffix}"
    bus = await connect(kafka_url, {"partitions": 3})
    try:
        # A group (a service's replicas) makes the topic; a fan-out reader joins it.
        await bus.subscribe(queue, group=f"g-{suffix}")
        subscription = await bus.subscribe(queue)
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_address)
        await admin.start()
        try:
            (described,) = await admin.describe_topics([f"topics.made.{suffix}"])
        finally:
            await admin.close()
        assert len(described["partitions"]) == 3
        # The fan-out subscription reads every partition: one message per call id
        # lands on some partition, and all of them arrive.
        ids = [str(i) for i in range(12)]
        for call_id in ids:
            await bus.publish(queue, call_id.encode(), {"id": call_id})
        got = set()
        with anyio.fail_after(10):
            async for delivery in subscription:
                got.add(delivery.body.decode())
                if len(got) == len(ids):
                    break
        assert got == set(ids)
    finally:
        await bus.close()
    # ...and they were spread over more than one partition.
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka_address, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(f"topics.made.{suffix}", p) for p in range(3)]
        ends = await consumer.end_offsets(partitions)
    finally:
        await consumer.stop()
    assert sum(ends.values()) == 12 and sum(1 for n in ends.values() if n) > 1


async def partitions_of(kafka_address: str, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_address)
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return len(described["partitions"])


@pytest.mark.anyio
@pytest.mark.broker
async def test_topics_of_answers_get_one_partition_and_requests_the_configured_count(
    kafka_address: str, kafka_url: str
) -> None:
    suffix = uuid.uuid4().hex[:10]
    bus = await connect(kafka_url, {"partitions": 3})
    try:
        # A client's response queue (read by a fan-out subscription), a queue named
        # as a response queue (TrustGraph's class "response") used first by a
        # service answering, and a request queue.
        await bus.subscribe(f"non-persistent://answers/read/{suffix}")
        await bus.publish(f"response:tg:{suffix}", b"{}", {"id": "1"})
        await bus.subscribe(f"non-persistent://tg/request/{suffix}", group="svc")
        counts = [
            await partitions_of(kafka_address, topic)
            for topic in (f"answers.read.{suffix}", f"tg.response.{suffix}", f"tg.request.{suffix}")
        ]
    finally:
        await bus.close()
    assert counts == [1, 1, 3]


@pytest.mark.anyio
@pytest.mark.broker
async def test_a_stream_from_a_producer_without_keys_arrives_in_order(
    kafka_address: str, kafka_url: str
) -> None:
    # TrustGraph's producers send each message without a key: on a topic of several
    # partitions its chunks would land on any of them, and the end of the stream
    # could overtake them. The client's response topic has one partition.
    from aiokafka import AIOKafkaProducer

    from toolbus import ToolServiceClient
    from toolbus.domain.calls import wire

    suffix = uuid.uuid4().hex[:10]
    route = {
        "request_queue": f"non-persistent://tg/request/{suffix}",
        "response_queue": f"non-persistent://tg/response/{suffix}",
    }
    chunks = [f"<{n}>" for n in range(20)]
    bus = await connect(kafka_url)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_address)
    await producer.start()
    try:
        requests = await bus.subscribe(route["request_queue"], group=f"svc-{suffix}")

        async def keyless_service() -> None:
            async for request in requests:
                headers = [("id", request.properties["id"].encode())]
                topic = f"tg.response.{suffix}"
                for chunk in chunks:
                    body = wire.encode_response(chunk, end_of_stream=False)
                    await producer.send_and_wait(topic, body, headers=headers)
                await producer.send_and_wait(topic, wire.encode_response(""), headers=headers)

        async with anyio.create_task_group() as tasks, ToolServiceClient(bus) as client:
            tasks.start_soon(keyless_service)
            streams = [
                [chunk async for chunk in client.stream(**route, timeout=30)] for _ in range(3)
            ]
            late = client._listeners[route["response_queue"]].late_chunks
            tasks.cancel_scope.cancel()
    finally:
        await producer.stop()
        await bus.close()
    assert streams == [chunks] * 3
    assert late == 0
