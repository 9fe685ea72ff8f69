"""Subscriptions: one aiokafka consumer each, read by whoever iterates them.

*Fan-out* (``group=None``): a consumer outside any group, assigned every
partition of the topic and positioned at its end before ``subscribe`` returns.
It sees every message published afterwards and keeps no offsets in Kafka.

*Group* (competing consumers): a member of the consumer group named after the
group; the group's members share the topic's partitions. Offsets are committed
only for what is done: on ``persistent://`` queues a record is done when it is
acked (the commit point is the first record not yet acked, see
:mod:`toolbus_kafka.tracking`); on ``non-persistent://`` queues when it is handed
to the subscriber (at-most-once). When a rebalance takes partitions away, the
member stops handing out their records, waits for its calls in flight on them
to be acked (bounded by the rebalance timeout) and commits before it lets go,
so the next owner neither repeats nor skips anything.

Readers fetch for themselves: one reader at a time (the *fetcher*) waits in
aiokafka's ``getmany``, the others wait in the subscription's inbox, a
:class:`~toolbus._internal.delivery_buffer.DeliveryBuffer`, for what it fetches. No task
sits between aiokafka and the readers, so a message costs no extra hop through
the event loop. A fetcher that leaves with a delivery while others still wait
and nothing is left passes them the turn to fetch.

A nacked delivery goes back to the front of this subscription's inbox and is
handed out again, marked redelivered. Closing commits what is done and leaves
the group; whatever is not done is read again by the member that takes over.

*A broker that lost its data* (a restart of a broker that keeps it in memory,
such as Tansu) comes back without the topic, the group and its offsets. A
member the group forgot gives up its partitions without committing (offsets
read before would point into a different log), makes sure the topic exists
again, and rejoins; a member that has been in the group before starts a
partition the group has no offset for at its beginning, so the requests sent
since the restart are all handled. A fan-out reader whose partition is now
shorter than where it was reading starts that partition again from its
beginning.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import ConsumerStoppedError, KafkaError

from toolbus._internal.delivery_buffer import DeliveryBuffer
from toolbus._internal.throttled_log import ThrottledLog
from toolbus.domain.errors import BusClosed, ToolbusError
from toolbus.ports import Delivery
from toolbus_kafka.options import KafkaOptions
from toolbus_kafka.provisioning import TopicManager
from toolbus_kafka.tracking import PartitionTracker

log = logging.getLogger("toolbus.kafka")

# getmany() returns as soon as records arrive; this bounds an idle wait, and so
# how long a nacked delivery can wait for a reader that is busy fetching.
_FETCH_WAIT_MS = 200
_RETRY_SECONDS = 0.5
_MAX_COMMIT_BACKOFF = 30.0
#: How often a fan-out reader compares its positions with the broker's logs.
_POSITION_CHECK_SECONDS = 1.0
#: aiokafka's generation of a member the group does not know (any more).
_NO_GENERATION = -1


def _properties(headers: Sequence[tuple[str, bytes | None]]) -> dict[str, str]:
    # Headers written by other clients need not be UTF-8: never fail on them.
    return {key: value.decode("utf-8", "replace") if value else "" for key, value in headers}


class KafkaDelivery:
    """One record as the subscriber sees it."""

    __slots__ = ("_body", "_owner", "_properties", "_redelivered", "_settled", "offset", "tracker")

    def __init__(
        self,
        body: bytes,
        properties: Mapping[str, str],
        owner: KafkaSubscription | None,
        tracker: PartitionTracker | None,
        offset: int,
        redelivered: bool = False,
    ) -> None:
        self._body = body
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
            self._body, self._properties, self._owner, self.tracker, self.offset, True
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
            self.inbox.offer_many(self.accept(partition, records))

    async def _fetch_failed(self, error: KafkaError) -> None:
        if not getattr(error, "retriable", False):
            log.error("reading Kafka topic %r failed: %s", self.topic, error)
            self.inbox.close(error)
            return
        self.warnings.warning("fetch", "reading Kafka topic %r: %s; retrying", self.topic, error)
        try:
            await asyncio.sleep(_RETRY_SECONDS)
        except asyncio.CancelledError:
            self.inbox.pass_turn()
            raise

    # -- hooks for the two kinds -------------------------------------------------

    def hand_out(self, delivery: KafkaDelivery) -> bool:
        """Called as a delivery leaves the inbox; False drops it instead."""
        return True

    def accept(self, partition: TopicPartition, records: Sequence[Any]) -> list[KafkaDelivery]:
        """Turn fetched records into deliveries (none for records that are not ours)."""
        owner = self if self.persistent else None
        return [
            KafkaDelivery(record.value or b"", _properties(record.headers), owner, None, 0)
            for record in records
        ]

    def acked(self, delivery: KafkaDelivery) -> None:
        """A persistent delivery was acked."""

    def nacked(self, delivery: KafkaDelivery) -> None:
        """A persistent delivery was nacked: hand it out again, unless we are leaving."""
        if not self.closed:
            self.inbox.push_front(delivery.again())

    # -- closing -------------------------------------------------------------------

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


class FanoutSubscription(KafkaSubscription):
    """Reads every partition from the end; no group, no offsets kept."""

    async def start(self, partitions: int) -> None:
        consumer = self.consumer
        await consumer.start()
        try:
            assigned = [TopicPartition(self.topic, p) for p in range(partitions)]
            consumer.assign(assigned)
            # Resolves every position now: what is published after we return is ours.
            await consumer.seek_to_end(*assigned)
        except BaseException:
            await consumer.stop()
            raise
        self._tasks.append(
            asyncio.create_task(self._follow_restarts(assigned), name=f"kafka-fanout-{self.topic}")
        )

    async def _follow_restarts(self, partitions: Sequence[TopicPartition]) -> None:
        """Read a partition again from its beginning when the broker's log of it is
        now shorter than where we are: the broker lost it (a restart without its
        data), and the records of the new log would otherwise be skipped until it
        grew past our old position. (Kafka answers such a fetch "out of range",
        which resets to the beginning too; Tansu answers it with nothing.)"""
        while True:
            await asyncio.sleep(_POSITION_CHECK_SECONDS)
            try:
                await self._rewind_restarted(partitions)
            except KafkaError as exc:
                self.warnings.warning("positions", "Kafka topic %r: %r", self.topic, exc)

    async def _rewind_restarted(self, partitions: Sequence[TopicPartition]) -> None:
        consumer = self.consumer
        for tp in partitions:
            end = consumer.highwater(tp)
            if end is None:
                continue
            position = await consumer.position(tp)
            if end < position:
                self.warnings.warning(
                    "restarted",
                    "Kafka topic %r: partition %d ends at %d, before offset %d read "
                    "already (the broker lost its data?); reading it from its beginning",
                    self.topic,
                    tp.partition,
                    end,
                    position,
                )
                await consumer.seek_to_beginning(tp)


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
                record.value or b"", _properties(record.headers), owner, tracker, record.offset
            )
            for record in records
            if tracker.accept(record.offset)
        ]

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
        return KafkaDelivery(delivery.body, delivery.properties, self, tracker, offset, True)

    # -- offsets -----------------------------------------------------------------------

    async def _commit_loop(self) -> None:
        interval = self.options.commit_interval_ms / 1000
        backoff = _RETRY_SECONDS
        while True:
            await self._commit_wanted.wait()
            if interval:
                # Acks that arrive meanwhile ride along in the same commit.
                await asyncio.sleep(interval)
            self._commit_wanted.clear()
            self._reassigned.clear()
            if await self._commit(self.trackers):
                backoff = _RETRY_SECONDS
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
                    tracker = positioned[tp] = PartitionTracker(await self._start_of(tp))
                except KafkaError as exc:
                    log.warning("no position for %s yet (%s); starting from its records", tp, exc)
                    tracker = self.trackers[tp] = PartitionTracker(0)
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
