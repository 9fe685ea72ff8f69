"""Holes in a partition's offsets: records the broker has not finished storing, or a real gap.

A reader expects each partition's records at consecutive offsets. Some
Kafka-compatible brokers hand out a batch's offsets before they store it
(Tansu reserves them, then writes the batch): a fetch in between returns the
batches stored after it, and a reader that moved on past that hole would
never see its records — an answer a client waits for in vain, a request a
group commits past. Kafka's own logs have holes that never fill, though
(compacted topics, transaction markers).

So a reader stops in front of a hole and reads again from it; a hole still
open after ``patience`` seconds is a real gap, and reading goes on past it.

Pure bookkeeping: no I/O; the caller passes the time.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence


class HoleWatch:
    """The holes a subscription's readers are waiting to see filled, one per partition."""

    __slots__ = ("_open", "patience")

    def __init__(self, patience: float) -> None:
        #: Seconds a hole may stay open before it is taken for a real gap.
        self.patience = patience
        #: Per partition: the first offset missing, and when it was first found missing.
        self._open: dict[Hashable, tuple[int, float]] = {}

    def readable(
        self, partition: Hashable, expected: int, offsets: Sequence[int], now: float
    ) -> tuple[int, int | None]:
        """How many of ``offsets`` (a fetched batch, ascending) may be read now, and
        the offset to read again from when that is not all of them.

        ``expected`` is the offset the partition's next record should have. Offsets
        below it (read before) are left to the caller.
        """
        for index, offset in enumerate(offsets):
            if offset > expected and not self._waited_out(partition, expected, now):
                return index, expected
            if offset >= expected:
                expected = offset + 1
        self._open.pop(partition, None)
        return len(offsets), None

    def _waited_out(self, partition: Hashable, missing: int, now: float) -> bool:
        """Whether the hole at ``missing`` has been open for ``patience`` seconds."""
        seen = self._open.get(partition)
        if seen is None or seen[0] != missing:
            self._open[partition] = (missing, now)
            return self.patience <= 0
        return now - seen[1] >= self.patience

    def forget(self, partition: Hashable) -> None:
        """The partition is read from elsewhere now (a seek, a new assignment)."""
        self._open.pop(partition, None)
