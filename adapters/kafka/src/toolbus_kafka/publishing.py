"""Sending: one producer per connection, records partitioned by call id, a lost topic made again.

Messages with the same ``id`` property go to the same partition, so the chunks
of a streamed answer arrive in the order they were sent; others go to any
partition. A send returns once the broker has the record (``acks``, default all).
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    UnknownError,
    UnknownTopicOrPartitionError,
)

from toolbus.domain.calls.wire import PROP_ID
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus_kafka.errors import KafkaUnavailable, message_refused
from toolbus_kafka.options import KafkaOptions
from toolbus_kafka.provisioning import TopicManager

log = logging.getLogger("toolbus.kafka")

#: Room for headers and record-batch framing on top of the body.
FRAMING = 64 * 1024
# What a broker that lost a topic answers a publish to it with (Tansu, while it
# makes the topic again: an unknown error).
_TOPIC_LOST = (UnknownTopicOrPartitionError, UnknownError)


class Publisher:
    """Sends records to topics through one aiokafka producer."""

    def __init__(
        self, client: Mapping[str, Any], options: KafkaOptions, topics: TopicManager
    ) -> None:
        self.options = options
        self.topics = topics
        self.producer = AIOKafkaProducer(
            **client,
            # Idempotence needs broker support some Kafka-compatible brokers lack
            # (Tansu among them); at-least-once does not depend on it.
            enable_idempotence=False,
            acks=options.acks_setting,
            linger_ms=options.linger_ms,
            max_request_size=options.max_message_size + FRAMING,
        )
        self._where = ",".join(options.bootstrap_servers)
        #: Set by the bus as it closes: a send failing then is the closing's doing.
        self.closed = False

    async def publish(self, topic: str, body: bytes, properties: Mapping[str, str] | None) -> None:
        limit = self.options.max_message_size
        if len(body) > limit:
            raise MessageTooLarge(
                len(body),
                limit,
                "raise it with kafka://...?max_message_size=BYTES (the topic's max.message.bytes "
                "and the broker's message.max.bytes must allow it too)",
            )
        headers = None
        call_id = None
        if properties:
            headers = [(key, value.encode()) for key, value in properties.items()]
            call_id = properties.get(PROP_ID)
        try:
            try:
                await self._send(topic, body, headers, call_id)
            except _TOPIC_LOST as exc:
                # The broker may have lost the topic (a restart without its data):
                # make it again, with its partition count read anew, and retry once.
                log.info("publishing to Kafka topic %r: %r; making sure it exists", topic, exc)
                await self.topics.ensure_again(topic)
                await self._send(topic, body, headers, call_id)
        except MessageSizeTooLargeError as exc:
            raise message_refused(len(body), topic) from exc
        except KafkaError as exc:
            if self.closed:
                raise BusClosed("the Kafka bus connection is closed") from exc
            # The next publish makes sure the topic exists again.
            self.topics.forget(topic)
            raise KafkaUnavailable(
                f"publishing to Kafka topic {topic!r} at {self._where} failed: {exc!r}"
            ) from exc

    async def _send(
        self,
        topic: str,
        body: bytes,
        headers: list[tuple[str, bytes]] | None,
        call_id: str | None,
    ) -> None:
        partition = None
        if call_id:
            partitions = self.topics.partitions_of(topic) or await self.topics.ensure(topic)
            partition = zlib.crc32(call_id.encode()) % partitions
        elif self.topics.partitions_of(topic) is None:
            await self.topics.ensure(topic)
        sent = await self.producer.send(topic, body, partition=partition, headers=headers)
        await sent

    async def start(self) -> None:
        await self.producer.start()

    async def stop(self) -> None:
        await self.producer.stop()
