"""Competing consumers: a member of the consumer group named after the toolbus group.

The group's members share the topic's partitions. Offsets are committed only
for what is done: on ``persistent://`` queues a record is done when it is acked
(the commit point is the first record not yet acked, see
:mod:`~toolbus_kafka.subscription.tracking`); on ``non-persistent://`` queues
when it is handed to the subscriber (at-most-once). When a rebalance takes
partitions away, the member stops handing out their records, waits for its
calls in flight on them to be acked (bounded by the rebalance timeout) and
commits before it lets go, so the next owner neither repeats nor skips
anything. A member the group forgot (the broker lost its data) gives up its
partitions without committing, makes sure the topic exists again, and rejoins;
one that was in the group before starts a partition the group has no offset
for at its beginning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from toolbus.domain.errors import ToolbusError
from toolbus_kafka.options import KafkaOptions
from toolbus_kafka.provisioning import TopicManager
from toolbus_kafka.subscription.reading import (
    RETRY_SECONDS,
    KafkaDelivery,
    KafkaSubscription,
    record_properties,
    record_timestamp,
)
from toolbus_kafka.subscription.tracking import PartitionTracker

log = logging.getLogger("toolbus.kafka")

_MAX_COMMIT_BACKOFF = 30.0
#: aiokafka's generation of a member the group does not know (any more).
_NO_GENERATION = -1


class _RebalanceListener(ConsumerRebalanceListener):  # type: ignore[misc]
    """aiokafka's callbacks, forwarded to the subscription."""

    def __init__(self, subscription: GroupSubscription) -> None:
        self._subscription = subscription

    async def on_partitions_revoked(self, revoked: Collection[TopicPartition]) -> None:
        await self._subscription.revoke(revoked)

    async def on_partitions_assigned(self, assigned: Collection[TopicPartition]) -> None:
        await self._subscription.assign(assigned)


class GroupSubscription(KafkaSubscription):
    """A member of a consumer group: shares partitions, commits what is done."""

    def __init__(
        self,
        consumer: AIOKafkaConsumer,
        topic: str,
        persistent: bool,
        options: KafkaOptions,
        topics: TopicManager,
    ) -> None:
        super().__init__(consumer, topic, persistent, options, topics)
        self.trackers: dict[TopicPartition, PartitionTracker] = {}
        self._assigned = asyncio.Event()
        #: Partitions were assigned to this member before (set after its first join).
        self._joined_before = False
        #: Set by each assignment: a commit retry waiting out a pause tries at once.
        self._reassigned = asyncio.Event()
        self._commit_wanted = asyncio.Event()
        self._commit_lock = asyncio.Lock()
        self._settled = asyncio.Event()
        self._draining = False
        #: Trackers of revoked partitions whose calls were still running.
        self._orphans: dict[TopicPartition, PartitionTracker] = {}
        consumer.subscribe([topic], listener=_RebalanceListener(self))

    async def start(self) -> None:
        try:
            # Returns once the group has given us partitions (possibly none).
            await self.consumer.start()
            await self._assigned.wait()
        except BaseException:
            await self.consumer.stop()
            raise
        self._tasks.append(
            asyncio.create_task(self._commit_loop(), name=f"kafka-commit-{self.topic}")
        )

    # -- records in and out ----------------------------------------------------------

    def accept(self, partition: TopicPartition, records: Sequence[Any]) -> list[KafkaDelivery]:
        tracker = self.trackers.get(partition)
        if tracker is None or tracker.revoked:
            return []  # fetched before a rebalance took the partition away
        owner = self if self.persistent else None
        return [
            KafkaDelivery(
                record.value or b"",
                record_properties(record.headers),
                owner,
                tracker,
                record.offset,
                enqueued_at=record_timestamp(record),
            )
            for record in records
            if tracker.accept(record.offset)
        ]

    def next_offset(self, partition: TopicPartition) -> int | None:
        tracker = self.trackers.get(partition)
        return None if tracker is None or tracker.revoked else tracker.next_offset

    def hand_out(self, delivery: KafkaDelivery) -> bool:
        tracker = delivery.tracker
        assert tracker is not None
        if tracker.revoked or not tracker.active:
            return False
        if self.persistent:
            tracker.handed_out(delivery.offset)
        else:
            # At-most-once: received is done.
            tracker.done(delivery.offset)
            self._commit_wanted.set()
        return True

    def acked(self, delivery: KafkaDelivery) -> None:
        self._settle(delivery, done=True)

    def nacked(self, delivery: KafkaDelivery) -> None:
        again = self._settle(delivery, done=False)
        if again is not None and not self.closed:
            self.inbox.push_front(again)

    def _settle(self, delivery: KafkaDelivery, done: bool) -> KafkaDelivery | None:
        """Book an ack or a nack; returns what to hand out again, if anything.

        A nacked record is not done, so it is not committed: if its partition has
        gone to another member, that member reads it again.
        """
        tracker, offset = delivery.tracker, delivery.offset
        assert tracker is not None
        tracker.settled(offset)
        heir = tracker.heir(offset)
        if heir is not None:
            # The partition came back to us while this call ran; its new tracker
            # has been holding the record back, waiting for this outcome.
            tracker = heir
            again = heir.inherited_settled(offset, done)
        else:
            if done and tracker.active:
                tracker.done(offset)
            again = not done
        if self._draining:
            self._settled.set()
        if not (tracker.active and not tracker.revoked):
            return None
        if done:
            self._commit_wanted.set()
            return None
        if not again:
            return None
        return KafkaDelivery(
            delivery.body, delivery.properties, self, tracker, offset, True, delivery.enqueued_at
        )

    # -- offsets -----------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        interval = self.options.commit_interval_ms / 1000
        backoff = RETRY_SECONDS
        while True:
            await self._commit_wanted.wait()
            if interval:
                # Acks that arrive meanwhile ride along in the same commit.
                await asyncio.sleep(interval)
            self._commit_wanted.clear()
            self._reassigned.clear()
            if await self._commit(self.trackers):
                backoff = RETRY_SECONDS
                continue
            # Failing again and again (the broker is away, say): spaced out more and
            # more, until the group hands out partitions again.
            self._commit_wanted.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._reassigned.wait(), backoff)
            backoff = min(backoff * 2, _MAX_COMMIT_BACKOFF)

    async def _commit(self, trackers: Mapping[TopicPartition, PartitionTracker]) -> bool:
        """Commit every tracker's commit point that Kafka does not have yet."""
        async with self._commit_lock:
            offsets = {tp: t.commit_point for tp, t in trackers.items() if t.needs_commit}
            if not offsets:
                return True
            # Bounded: aiokafka retries a retriable failure without end (a topic the
            # broker lost in a restart, say), which would hold up the rebalance
            # that recovers from it.
            limit = self.options.session_timeout_ms / 1000
            try:
                await asyncio.wait_for(self.consumer.commit(offsets), limit)
            except (KafkaError, TimeoutError) as exc:
                self.warnings.warning(
                    "commit", "committing offsets of Kafka topic %r failed: %r", self.topic, exc
                )
                return False
            for tp, offset in offsets.items():
                tracker = trackers[tp]
                tracker.committed = max(tracker.committed, offset)
            return True

    # -- rebalances --------------------------------------------------------------------

    async def assign(self, assigned: Collection[TopicPartition]) -> None:
        """New partitions: start tracking them from the group's position."""
        orphans, self._orphans = self._orphans, {}
        try:
            positioned = {}
            for tp in assigned:
                try:
                    start = await self._start_of(tp)
                except KafkaError as exc:
                    # Where the consumer starts by itself: the group's offset, or the
                    # beginning. Its start is committed below like any other.
                    log.warning("no start for %s (%s); starting where the consumer does", tp, exc)
                    start = await self.consumer.position(tp)
                tracker = positioned[tp] = PartitionTracker(start)
                previous = orphans.get(tp)
                if previous is not None:
                    # Back to us while some of its calls still run here: not again.
                    tracker.inherit(previous)
            self.trackers.update(positioned)
            # A partition the group never committed would make its next owner start
            # at the *end* and skip what arrived meanwhile: commit every start now.
            for tracker in positioned.values():
                tracker.committed = -1
            await self._commit(positioned)
        except Exception:
            log.exception("taking over partitions of Kafka topic %r failed", self.topic)
        finally:
            self._joined_before = True
            self._reassigned.set()
            self._assigned.set()

    async def _start_of(self, tp: TopicPartition) -> int:
        """Where this member starts reading a partition it was given.

        At the group's committed offset when there is one. Otherwise at the end
        when this member joins for the first time (a new group starts at the end,
        like a new subscription on any broker), and at the beginning when it has
        been a member before: then the group lost its offsets (a broker that
        restarted without its data) or the partition is new, and all it holds
        arrived while this subscription was running.
        """
        consumer = self.consumer
        if not self._joined_before and await consumer.committed(tp) is None:
            await consumer.seek_to_end(tp)
        return int(await consumer.position(tp))

    async def revoke(self, revoked: Collection[TopicPartition]) -> None:
        """Partitions go to other members: finish (bounded), commit, let go."""
        trackers = {tp: self.trackers[tp] for tp in revoked if tp in self.trackers}
        if not trackers:
            return
        if self._membership_lost():
            await self._lose(trackers)
            return
        leaving = set(trackers.values())
        for tracker in leaving:
            tracker.revoked = True
        self.inbox.purge(lambda delivery: delivery.tracker in leaving)
        self._draining = True
        try:
            await self._wait_for_calls_in_flight(leaving)
        finally:
            self._draining = False
        await self._commit(trackers)
        for tp, tracker in trackers.items():
            tracker.active = False
            del self.trackers[tp]
            if tracker.outstanding:
                self._orphans[tp] = tracker

    def _membership_lost(self) -> bool:
        """Whether the group forgot this member before this rebalance: its session
        ran out, or the broker restarted without its data.

        aiokafka reports lost partitions as revoked ones (it has no
        ``on_partitions_lost``); it resets the member's generation when the
        coordinator does not know the member, and that is what is read here.
        """
        coordinator = getattr(self.consumer, "_coordinator", None)
        return getattr(coordinator, "generation", None) == _NO_GENERATION

    async def _lose(self, trackers: Mapping[TopicPartition, PartitionTracker]) -> None:
        """Let go of partitions the group already took away, committing nothing.

        The group may have given them to another member, or the broker may have
        lost the topic with its offsets, so that offsets read before point into a
        different log: committing them could skip requests sent since. Calls still
        running are not waited for and their acks commit nothing; what the group
        has no offset for is read again by the next owner.
        """
        leaving = set(trackers.values())
        for tp, tracker in trackers.items():
            tracker.revoked = True
            tracker.active = False
            del self.trackers[tp]
        self.inbox.purge(lambda delivery: delivery.tracker in leaving)
        self.warnings.warning(
            "lost",
            "Kafka topic %r: the group no longer knew this member (the broker restarted, "
            "or the member's session ran out); rejoining",
            self.topic,
        )
        # An empty broker has lost the topic as well: make it again before rejoining,
        # or the group would find nothing to share out.
        try:
            await asyncio.wait_for(
                self.topics.ensure_again(self.topic), self.options.session_timeout_ms / 1000
            )
        except (KafkaError, ToolbusError, TimeoutError) as exc:
            self.warnings.warning(
                "topic", "making sure Kafka topic %r exists failed: %r", self.topic, exc
            )

    async def _wait_for_calls_in_flight(self, trackers: Collection[PartitionTracker]) -> None:
        options = self.options
        budget = max(0, options.rebalance_timeout_ms - 2 * options.heartbeat_interval_ms) / 1000
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        while not self.closed:
            in_flight = sum(tracker.outstanding for tracker in trackers)
            if not in_flight:
                return
            self._settled.clear()
            try:
                await asyncio.wait_for(self._settled.wait(), deadline - loop.time())
            except TimeoutError:
                log.warning(
                    "Kafka topic %r: %d call(s) still in flight when giving up partitions "
                    "in a rebalance; the next owner may handle them again",
                    self.topic,
                    in_flight,
                )
                return

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._settled.set()  # a rebalance waiting for calls in flight stops waiting
        await self._stop_tasks()
        self.inbox.close()
        try:
            await self._commit(self.trackers)
        finally:
            for tracker in self.trackers.values():
                tracker.active = False
            self.trackers.clear()
            # Leaves the group: the others take over, from what was committed.
            await self.consumer.stop()
