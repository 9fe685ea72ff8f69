"""Making sure a topic exists, with toolbus's partition count, before it is used.

Topics are created explicitly through the admin API rather than left to the
broker's auto-creation, which (where it is on at all) uses the broker's default
partition count and message size. A topic that already exists is used as it
is; its partition count is read back, because producers spread messages over
every partition and fan-out subscriptions read them all.

A topic that carries *answers* (a client reads it, or its name says it is a
response queue) is made with ``response_partitions``, one by default: on one
partition every producer's messages keep their order, also those of producers
that send without a key (TrustGraph's), which would otherwise spread a stream's
chunks over the partitions and let its end overtake them. Request topics get
``partitions``, the most replicas of a service that can share them.

NATS's adapter does the same job for JetStream streams in its own ``provisioning``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Protocol

from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError, for_code

from toolbus_kafka.errors import KafkaTopicError
from toolbus_kafka.options import KafkaOptions

log = logging.getLogger("toolbus.kafka")


class AdminClient(Protocol):
    """The part of ``aiokafka.admin.AIOKafkaAdminClient`` used here."""

    async def create_topics(self, new_topics: list[NewTopic]) -> Any: ...

    async def describe_topics(self, topics: list[str]) -> list[dict[str, Any]]: ...


class TopicManager:
    """Creates topics on first use and remembers their partition counts."""

    def __init__(self, admin: AdminClient, options: KafkaOptions) -> None:
        self._admin = admin
        self._options = options
        self._partitions: dict[str, int] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        #: Topics that carry answers: made with ``response_partitions``.
        self._answers: set[str] = set()

    def carries_answers(self, topic: str) -> None:
        """``topic`` carries answers: make it with ``response_partitions`` if it is made."""
        self._answers.add(topic)

    def forget(self, topic: str) -> None:
        """Ensure ``topic`` again on its next use: the broker may have lost it."""
        self._partitions.pop(topic, None)

    async def ensure_again(self, topic: str) -> int:
        """Create ``topic`` if the broker lost it (a restart of a broker that keeps
        no data, say); return its partition count. One request when it is there."""
        self.forget(topic)
        return await self.ensure(topic)

    def partitions_of(self, topic: str) -> int | None:
        """The partition count of a topic already ensured, else None (no I/O)."""
        return self._partitions.get(topic)

    async def ensure(self, topic: str) -> int:
        """Create ``topic`` unless it exists; return its partition count."""
        count = self._partitions.get(topic)
        if count is not None:
            return count
        async with self._locks.setdefault(topic, asyncio.Lock()):
            count = self._partitions.get(topic)
            if count is None:
                count = self._partitions[topic] = await self._create(topic)
        return count

    async def _create(self, topic: str) -> int:
        options = self._options
        answers = topic in self._answers
        partitions = options.response_partitions if answers else options.partitions
        request = NewTopic(
            topic,
            partitions,
            options.replication_factor,
            topic_configs={
                "max.message.bytes": str(options.max_message_size),
                # The broker stamps each record as it takes it: services check call
                # tokens as of that moment, which a producer then cannot backdate.
                "message.timestamp.type": "LogAppendTime",
            },
        )
        try:
            response = await self._admin.create_topics([request])
            _, code, *detail = response.topic_errors[0]
        except KafkaError as exc:
            code, detail = -1, [str(exc)]
        if code == 0:
            log.info("created Kafka topic %r with %d partition(s)", topic, partitions)
            return partitions
        error = for_code(code) if code != -1 else KafkaError
        # Already there (made by someone else, or before), or we may not create topics
        # but may use them: either way an existing topic is all we need.
        count = await self._existing_partitions(topic)
        if count:
            if error is not TopicAlreadyExistsError:
                log.debug("using existing topic %r (could not create it: %s)", topic, error)
            if answers and count > 1:
                log.info(
                    "Kafka topic %r carries answers on %d partitions: a producer that sends "
                    "without a key (TrustGraph's) can deliver a stream's chunks out of order; "
                    "make it again with one partition",
                    topic,
                    count,
                )
            return count
        message = detail[0] if detail and detail[0] else getattr(error, "description", "")
        raise KafkaTopicError(topic, f"{error.__name__}: {message}".rstrip(": "))

    async def _existing_partitions(self, topic: str) -> int:
        try:
            described = await self._admin.describe_topics([topic])
        except KafkaError as exc:
            log.debug("could not describe topic %r: %s", topic, exc)
            return 0
        for entry in described:
            if entry.get("topic") == topic and entry.get("error_code", 0) == 0:
                return len(entry.get("partitions") or ())
        return 0
