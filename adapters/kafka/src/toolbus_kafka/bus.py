"""The Kafka :class:`~toolbus.ports.Bus`: a producer per connection, a consumer per subscription.

A queue maps to the Kafka topic ``parse_queue(queue).dotted``
(``non-persistent://tg/request/joke`` → ``tg.request.joke``), created on first
use (:mod:`~toolbus_kafka.provisioning`; a topic of answers with one
partition). Message properties travel as Kafka
record headers (values UTF-8). Sending is :mod:`~toolbus_kafka.publishing`'s
job, reading :mod:`~toolbus_kafka.subscription`'s.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

from toolbus._internal.reachability import refused_by_all
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BusClosed
from toolbus_kafka.errors import KafkaUnavailable
from toolbus_kafka.logs import throttle_client_logs
from toolbus_kafka.options import KafkaOptions, parse_options
from toolbus_kafka.provisioning import TopicManager
from toolbus_kafka.publishing import FRAMING, Publisher
from toolbus_kafka.security import security_kwargs
from toolbus_kafka.subscription import FanoutSubscription, GroupSubscription, KafkaSubscription

log = logging.getLogger("toolbus.kafka")

#: The namespace of response queues: TrustGraph's class ``response``
#: (``response:tg:joke``), and toolbus's default ``non-persistent://tg/response/joke``.
RESPONSE_NAMESPACE = "response"


class KafkaBus:
    """A connection to a Kafka cluster. Create it with :func:`connect`."""

    def __init__(self, options: KafkaOptions) -> None:
        throttle_client_logs()
        self.options = options
        #: What every aiokafka client of this bus is made with: brokers, TLS, SASL.
        self._client = {**options.connection_kwargs(), **security_kwargs(options)}
        self._admin = AIOKafkaAdminClient(**self._client)
        self.topics = TopicManager(self._admin, options)
        self._publisher = Publisher(self._client, options, self.topics)
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
            await self._publisher.start()
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
            if not name.plain and name.namespace == RESPONSE_NAMESPACE:
                self.topics.carries_answers(name.dotted)
        return route

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        if self.closed:
            raise BusClosed("the Kafka bus connection is closed")
        topic, _ = self._routes.get(queue) or self._route(queue)
        await self._publisher.publish(topic, body, properties)

    async def subscribe(self, queue: str, group: str | None = None) -> KafkaSubscription:
        if self.closed:
            raise BusClosed("the Kafka bus connection is closed")
        topic, persistent = self._route(queue)
        if group is None:
            self.topics.carries_answers(topic)  # a client's response queue
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
            **self._client,
            "group_id": group,
            # Offsets are committed by the subscription, for what is done.
            "enable_auto_commit": False,
            "fetch_max_wait_ms": fetch_max_wait_ms,
            "max_partition_fetch_bytes": max(1024 * 1024, options.max_message_size + FRAMING),
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
        self.closed = self._publisher.closed = True
        subscriptions = list(self.subscriptions)
        self.subscriptions.clear()
        await asyncio.gather(*(s.close() for s in subscriptions), return_exceptions=True)
        await self._stop_clients()

    async def _stop_clients(self) -> None:
        for stop in (self._publisher.stop, self._admin.close):
            try:
                await stop()
            except Exception:
                log.debug("stopping a Kafka client failed", exc_info=True)


async def connect(url: str, options: Mapping[str, Any] | None = None) -> KafkaBus:
    """Connect to the Kafka cluster at ``url`` (``kafka://host:port[,host:port][?option=...]``).

    ``options`` may give the same keys as the URL's query (and wins over it); see
    :class:`~toolbus_kafka.options.KafkaOptions` and ``docs/adapters/kafka.md``.
    Fails with :class:`~toolbus_kafka.errors.KafkaUnavailable` when the brokers
    cannot be reached, at once when nothing listens on any of them.
    """
    parsed = parse_options(url, options)
    nothing = await refused_by_all(parsed.bootstrap_servers)
    if nothing is not None:
        raise KafkaUnavailable(
            f"cannot connect to the Kafka brokers at {','.join(parsed.bootstrap_servers)}: "
            f"{nothing}; check that they run there and that the URL is right"
        )
    bus = KafkaBus(parsed)
    await bus.start()
    return bus
