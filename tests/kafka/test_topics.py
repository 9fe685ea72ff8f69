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
