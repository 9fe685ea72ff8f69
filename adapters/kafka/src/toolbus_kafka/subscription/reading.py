"""What both kinds of subscription share: readers taking turns to fetch, the inbox, deliveries.

Readers fetch for themselves: one reader at a time (the *fetcher*) waits in
aiokafka's ``getmany``, the others wait in the subscription's inbox, a
:class:`~toolbus._internal.delivery_buffer.DeliveryBuffer`, for what it fetches. No task
sits between aiokafka and the readers, so a message costs no extra hop through
the event loop. A fetcher that leaves with a delivery while others still wait
and nothing is left passes them the turn to fetch. A nacked delivery goes back
to the front of the inbox and is handed out again, marked redelivered. A
fetched batch that skips offsets is read up to the hole, and the partition
again from the hole, until the hole fills or turns out to be a real gap
(:mod:`~toolbus_kafka.subscription.holes`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from toolbus._internal.delivery_buffer import DeliveryBuffer
from toolbus._internal.throttled_log import ThrottledLog
from toolbus.domain.errors import BusClosed
from toolbus.ports import Delivery
from toolbus_kafka.options import KafkaOptions
from toolbus_kafka.provisioning import TopicManager
from toolbus_kafka.subscription.holes import HoleWatch
from toolbus_kafka.subscription.tracking import PartitionTracker

log = logging.getLogger("toolbus.kafka")

# getmany() returns as soon as records arrive; this bounds an idle wait, and so
# how long a nacked delivery can wait for a reader that is busy fetching.
_FETCH_WAIT_MS = 200
#: Seconds before reading or committing again after a failure the broker may get over.
RETRY_SECONDS = 0.5
#: Seconds a hole in a partition's offsets is read again before it counts as a real
#: gap. A broker storing a batch fills its hole within milliseconds; a real gap
#: (compaction, transaction markers) costs this much delay once.
HOLE_PATIENCE_SECONDS = 0.5


def record_properties(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    # Headers written by other clients need not be UTF-8: never fail on them.
    return {key: value.decode("utf-8", "replace") if value else "" for key, value in headers}


def record_timestamp(record: Any) -> float | None:
    """A record's timestamp in Unix seconds (Kafka keeps milliseconds; -1 for none)."""
    timestamp = record.timestamp
    return timestamp / 1000 if isinstance(timestamp, int) and timestamp >= 0 else None


class KafkaDelivery:
    """One record as the subscriber sees it."""

    __slots__ = (
        "_body",
        "_owner",
        "_properties",
        "_redelivered",
        "_settled",
        "enqueued_at",
        "offset",
        "tracker",
    )

    def __init__(
        self,
        body: bytes,
        properties: Mapping[str, str],
        owner: KafkaSubscription | None,
        tracker: PartitionTracker | None,
        offset: int,
        redelivered: bool = False,
        enqueued_at: float | None = None,
    ) -> None:
        self._body = body
        #: The record's timestamp: the broker's (LogAppendTime) or the producer's (CreateTime).
        self.enqueued_at = enqueued_at
        self._properties = properties
        #: The subscription to tell about ack/nack; None when they are no-ops.
        self._owner = owner
        self._redelivered = redelivered
        self._settled = False
        self.tracker = tracker
        self.offset = offset

    @property
    def body(self) -> bytes:
        return self._body

    @property
    def properties(self) -> Mapping[str, str]:
        return self._properties

    @property
    def redelivered(self) -> bool:
        return self._redelivered

    async def ack(self) -> None:
        owner = self._owner
        if owner is not None and not self._settled:
            self._settled = True
            owner.acked(self)

    async def nack(self) -> None:
        owner = self._owner
        if owner is not None and not self._settled:
            self._settled = True
            owner.nacked(self)

    def again(self) -> KafkaDelivery:
        """A fresh delivery of the same record, for redelivery."""
        return KafkaDelivery(
            self._body,
            self._properties,
            self._owner,
            self.tracker,
            self.offset,
            True,
            self.enqueued_at,
        )


class KafkaSubscription:
    """The part every subscription shares: fetching, the inbox, iteration, closing."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        topic: str,
        persistent: bool,
        options: KafkaOptions,
        topics: TopicManager,
    ) -> None:
        self.consumer = consumer
        self.topic = topic
        self.persistent = persistent
        self.options = options
        self.topics = topics
        #: Failures that repeat while the broker is away: one line a minute each.
        self.warnings = ThrottledLog(log)
        self.inbox: DeliveryBuffer[KafkaDelivery] = DeliveryBuffer()
        self.closed = False
        #: A reader is waiting in aiokafka for the next batch.
        self._fetching = False
        self.holes = HoleWatch(HOLE_PATIENCE_SECONDS)
        self._tasks: list[asyncio.Task[None]] = []

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        inbox = self.inbox
        while not (self.closed or inbox.closed):
            delivery = inbox.take()
            if delivery is None:
                if self._fetching:
                    await inbox.woken()  # for a delivery, or the turn to fetch
                else:
                    await self._fetch()
                continue
            if self.hand_out(delivery):
                if not inbox and not self._fetching:
                    inbox.pass_turn()  # someone must fetch for those still waiting
                return delivery
        error = inbox.error
        if error is None or self.closed:
            raise StopAsyncIteration
        raise BusClosed(
            f"the Kafka subscription to topic {self.topic!r} failed: {error}"
        ) from error

    async def _fetch(self) -> None:
        """Wait in aiokafka for the next batch and share it out (one reader at a time)."""
        self._fetching = True
        try:
            batches = await self.consumer.getmany(
                timeout_ms=_FETCH_WAIT_MS, max_records=self.options.prefetch
            )
        except asyncio.CancelledError:
            self._fetching = False
            self.inbox.pass_turn()  # a waiting reader fetches instead
            raise
        except ConsumerStoppedError:
            batches = {}  # closing
        except KafkaError as exc:
            self._fetching = False
            await self._fetch_failed(exc)
            return
        self._fetching = False
        for partition, records in batches.items():
            if records:
                records = self._until_hole(partition, records)
            self.inbox.offer_many(self.accept(partition, records))

    def _until_hole(self, partition: TopicPartition, records: Sequence[Any]) -> Sequence[Any]:
        """The records before the first hole in the partition's offsets, reading the
        partition again from the hole; all of them when there is none (or it is a real gap)."""
        expected = self.next_offset(partition)
        if expected is None:
            return records
        first, last = records[0].offset, records[-1].offset
        if first == expected and last - first == len(records) - 1:
            return records  # consecutive: offsets only ever grow
        offsets = [record.offset for record in records]
        readable, again = self.holes.readable(partition, expected, offsets, time.monotonic())
        if again is not None:
            log.debug(
                "Kafka topic %r: partition %d has no offset %d yet, but later ones; "
                "reading it again from there",
                self.topic,
                partition.partition,
                again,
            )
            self.consumer.seek(partition, again)
        return records[:readable]

    async def _fetch_failed(self, error: KafkaError) -> None:
        if not getattr(error, "retriable", False):
            log.error("reading Kafka topic %r failed: %s", self.topic, error)
            self.inbox.close(error)
            return
        self.warnings.warning("fetch", "reading Kafka topic %r: %s; retrying", self.topic, error)
        try:
            await asyncio.sleep(RETRY_SECONDS)
        except asyncio.CancelledError:
            self.inbox.pass_turn()
            raise

    # -- hooks for the two kinds -------------------------------------------------

    def hand_out(self, delivery: KafkaDelivery) -> bool:
        """Called as a delivery leaves the inbox; False drops it instead."""
        return True

    def next_offset(self, partition: TopicPartition) -> int | None:
        """The offset the partition's next record should have; None to take what comes."""
        return None

    def accept(self, partition: TopicPartition, records: Sequence[Any]) -> list[KafkaDelivery]:
        """Turn fetched records into deliveries (none for records that are not ours)."""
        owner = self if self.persistent else None
        return [
            KafkaDelivery(
                record.value or b"",
                record_properties(record.headers),
                owner,
                None,
                0,
                enqueued_at=record_timestamp(record),
            )
            for record in records
        ]

    def acked(self, delivery: KafkaDelivery) -> None:
        """A persistent delivery was acked."""

    def nacked(self, delivery: KafkaDelivery) -> None:
        """A persistent delivery was nacked: hand it out again, unless we are leaving."""
        if not self.closed:
            self.inbox.push_front(delivery.again())

    # -- closing -------------------------------------------------------------------

    async def stop_intake(self) -> None:
        """Fetch no more: what was fetched is handed out, then iteration ends.

        Records not fetched stay uncommitted, so the members that get this one's
        partitions when it closes read them.
        """
        self.inbox.finish()

    async def _stop_tasks(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)
        self._tasks.clear()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self._stop_tasks()
        self.inbox.close()
        # Also ends a reader waiting in aiokafka.
        await self.consumer.stop()
