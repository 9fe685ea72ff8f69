"""The Kafka :class:`~toolbus.ports.Bus`: a producer per connection, a consumer per subscription.

A queue maps to the Kafka topic ``parse_queue(queue).dotted``
(``non-persistent://tg/request/joke`` → ``tg.request.joke``), created on first
use. Message properties travel as Kafka record headers (values UTF-8). Messages
with the same ``id`` property go to the same partition, so the chunks of a
streamed answer arrive in the order they were sent; others go to any partition.
``publish`` returns once the broker has the message (``acks``, default all).
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    KafkaError,
    MessageSizeTooLargeError,
    UnknownError,
    UnknownTopicOrPartitionError,
)

from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.calls.wire import PROP_ID
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus_kafka.errors import KafkaUnavailable, MessageRefused
from toolbus_kafka.logs import throttle_aiokafka_logs
from toolbus_kafka.options import KafkaOptions, parse_options
from toolbus_kafka.provisioning import TopicManager
from toolbus_kafka.subscription import FanoutSubscription, GroupSubscription, KafkaSubscription

log = logging.getLogger("toolbus.kafka")

# Room for headers and record-batch framing on top of the body.
_FRAMING = 64 * 1024
# What a broker that lost a topic answers a publish to it with (Tansu, while it
# makes the topic again: an unknown error).
_TOPIC_LOST = (UnknownTopicOrPartitionError, UnknownError)


class KafkaBus:
    """A connection to a Kafka cluster. Create it with :func:`connect`."""

    def __init__(self, options: KafkaOptions) -> None:
        throttle_aiokafka_logs()
        self.options = options
        client = options.client_kwargs()
        self._producer = AIOKafkaProducer(
            **client,
            # Idempotence needs broker support some Kafka-compatible brokers lack
            # (Tansu among them); at-least-once does not depend on it.
            enable_idempotence=False,
            acks=options.acks_setting,
            linger_ms=options.linger_ms,
            max_request_size=options.max_message_size + _FRAMING,
        )
        self._admin = AIOKafkaAdminClient(**client)
        self.topics = TopicManager(self._admin, options)
        self.subscriptions: set[KafkaSubscription] = set()
        self._routes: dict[str, tuple[str, bool]] = {}
        self.closed = False

    @property
    def max_message_size(self) -> int | None:
        return self.options.max_message_size

    def _where(self) -> str:
        return ",".join(self.options.bootstrap_servers)

    async def start(self) -> None:
        """Connect the producer and the admin client; a clear error if the brokers are away."""
        try:
            await self._producer.start()
            await self._admin.start()
        except KafkaError as exc:
            await self._stop_clients()
            raise KafkaUnavailable(
                f"cannot connect to the Kafka brokers at {self._where()}: {exc}; check the URL, "
                "that the brokers are running and listening there, and the security options"
            ) from exc

    def _route(self, queue: str) -> tuple[str, bool]:
        route = self._routes.get(queue)
        if route is None:
            name = parse_queue(queue)
            route = self._routes[queue] = (name.dotted, name.persistent)
        return route

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        if self.closed:
            raise BusClosed("the Kafka bus connection is closed")
        topic, _ = self._route(queue)
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
            raise MessageRefused(len(body), topic) from exc
        except KafkaError as exc:
            if self.closed:
                raise BusClosed("the Kafka bus connection is closed") from exc
            # The next publish makes sure the topic exists again.
            self.topics.forget(topic)
            raise KafkaUnavailable(
                f"publishing to Kafka topic {topic!r} at {self._where()} failed: {exc!r}"
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
        sent = await self._producer.send(topic, body, partition=partition, headers=headers)
        await sent

    async def subscribe(self, queue: str, group: str | None = None) -> KafkaSubscription:
        if self.closed:
            raise BusClosed("the Kafka bus connection is closed")
        topic, persistent = self._route(queue)
        partitions = await self.topics.ensure(topic)
        options = self.options
        subscription: FanoutSubscription | GroupSubscription
        try:
            if group is None:
                subscription = FanoutSubscription(
                    self._consumer(None, options.fanout_fetch_max_wait_ms),
                    topic,
                    persistent,
                    options,
                    self.topics,
                )
                await subscription.start(partitions)
            else:
                subscription = GroupSubscription(
                    self._consumer(group, options.group_fetch_max_wait_ms),
                    topic,
                    persistent,
                    options,
                    self.topics,
                )
                await subscription.start()
        except KafkaError as exc:
            raise KafkaUnavailable(
                f"subscribing to Kafka topic {topic!r}"
                + (f" as group {group!r}" if group else "")
                + f" at {self._where()} failed: {exc!r}"
            ) from exc
        # Forget subscriptions their owners closed already.
        self.subscriptions = {s for s in self.subscriptions if not s.closed}
        self.subscriptions.add(subscription)
        return subscription

    def _consumer(self, group: str | None, fetch_max_wait_ms: int) -> AIOKafkaConsumer:
        options = self.options
        settings: dict[str, Any] = {
            **options.client_kwargs(),
            "group_id": group,
            # Offsets are committed by the subscription, for what is done.
            "enable_auto_commit": False,
            "fetch_max_wait_ms": fetch_max_wait_ms,
            "max_partition_fetch_bytes": max(1024 * 1024, options.max_message_size + _FRAMING),
            "max_poll_records": options.prefetch,
        }
        # Positions are chosen explicitly (see the subscriptions); "earliest" is for
        # a position the broker no longer has: a slow reader that fell behind
        # retention skips the least, and after a broker lost a topic everything in
        # the new one is read, nothing skipped.
        settings["auto_offset_reset"] = "earliest"
        if group is not None:
            settings.update(
                session_timeout_ms=options.session_timeout_ms,
                heartbeat_interval_ms=options.heartbeat_interval_ms,
                rebalance_timeout_ms=options.rebalance_timeout_ms,
            )
        return AIOKafkaConsumer(**settings)

    async def close(self) -> None:
        """Close every subscription (their groups hand over cleanly), then the clients."""
        if self.closed:
            return
        self.closed = True
        subscriptions = list(self.subscriptions)
        self.subscriptions.clear()
        await asyncio.gather(*(s.close() for s in subscriptions), return_exceptions=True)
        await self._stop_clients()

    async def _stop_clients(self) -> None:
        for stop in (self._producer.stop, self._admin.close):
            try:
                await stop()
            except Exception:
                log.debug("stopping a Kafka client failed", exc_info=True)


async def connect(url: str, options: Mapping[str, Any] | None = None) -> KafkaBus:
    """Connect to the Kafka cluster at ``url`` (``kafka://host:port[,host:port][?option=...]``).

    ``options`` may give the same keys as the URL's query (and wins over it); see
    :class:`~toolbus_kafka.options.KafkaOptions` and ``docs/adapters/kafka.md``.
    """
    bus = KafkaBus(parse_options(url, options))
    await bus.start()
    return bus
