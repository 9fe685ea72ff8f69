"""Fan-out: a consumer outside any group, reading every partition from its end.

It is assigned every partition of the topic and positioned at its end before
``subscribe`` returns, so it sees every message published afterwards; it keeps
no offsets in Kafka. A partition whose log is now shorter than where it was
reading (the broker lost its data) is read again from its beginning.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from aiokafka import TopicPartition
from aiokafka.errors import KafkaError

from toolbus_kafka.subscription.reading import KafkaDelivery, KafkaSubscription

#: How often a fan-out reader compares its positions with the broker's logs.
_POSITION_CHECK_SECONDS = 1.0


class FanoutSubscription(KafkaSubscription):
    """Reads every partition from the end; no group, no offsets kept."""

    #: Per partition, the offset after the last record read (none after a rewind).
    _next_offsets: dict[TopicPartition, int]

    async def start(self, partitions: int) -> None:
        consumer = self.consumer
        await consumer.start()
        try:
            assigned = [TopicPartition(self.topic, p) for p in range(partitions)]
            consumer.assign(assigned)
            # Resolves every position now: what is published after we return is ours.
            await consumer.seek_to_end(*assigned)
            self._next_offsets = {tp: await consumer.position(tp) for tp in assigned}
        except BaseException:
            await consumer.stop()
            raise
        self._tasks.append(
            asyncio.create_task(self._follow_restarts(assigned), name=f"kafka-fanout-{self.topic}")
        )

    def next_offset(self, partition: TopicPartition) -> int | None:
        return self._next_offsets.get(partition)

    def accept(self, partition: TopicPartition, records: Sequence[Any]) -> list[KafkaDelivery]:
        if records:
            self._next_offsets[partition] = records[-1].offset + 1
        return super().accept(partition, records)

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
                # The new log's offsets start again: take its first record as it comes.
                self._next_offsets.pop(tp, None)
                self.holes.forget(tp)
