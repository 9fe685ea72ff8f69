"""Which offset of a partition may be committed, when acks arrive in any order.

Kafka remembers one number per partition and group: the offset of the next
record to read. A service handles many requests at once, so they are acked out
of order; committing the offset after the newest ack would lose the older
requests still in flight if the member died. A :class:`PartitionTracker`
therefore commits only up to the first record that is not done yet: the
*highest contiguous* acked offset plus one.

Offsets are tracked in the order records were fetched, not by arithmetic, because
a partition's offsets may have gaps (compaction, transaction markers).

When a rebalance takes a partition away while calls on it are still running
and then gives it back to the same member, the new tracker *inherits* those
calls: it reads their records again but does not hand them out a second time,
and counts them done when the running calls are acked.

Pure bookkeeping: no I/O, no clock, no event loop.
"""

from __future__ import annotations

from collections import deque


class PartitionTracker:
    """Offsets of one partition, for one assignment of it to this member."""

    __slots__ = (
        "_done",
        "_inherited",
        "_pending",
        "active",
        "committed",
        "in_flight",
        "next_offset",
        "revoked",
        "successor",
    )

    def __init__(self, start: int) -> None:
        #: Offsets fetched and not yet done, in fetch order.
        self._pending: deque[int] = deque()
        #: Offsets done while an older one is still pending (or not fetched yet).
        self._done: set[int] = set()
        #: Offsets still being handled by deliveries of an earlier assignment.
        self._inherited: set[int] = set()
        #: The offset after the last record accepted.
        self.next_offset = start
        #: The offset Kafka holds for the group (as far as this member knows).
        self.committed = start
        #: Offsets handed out and neither acked nor nacked yet.
        self.in_flight: set[int] = set()
        #: False once the partition was revoked or the subscription closed: late
        #: acks must not commit for a partition another member may own now.
        self.active = True
        #: True once a rebalance is taking the partition away: nothing more of it
        #: is handed out, while acks of deliveries in flight still count.
        self.revoked = False
        #: The tracker of the next assignment of this partition to this member.
        self.successor: PartitionTracker | None = None

    def accept(self, offset: int) -> bool:
        """Record a fetched record; True when it should be handed out.

        False for a record seen before (a stale fetch) and for one whose handling
        is still under way from an earlier assignment (or already finished).
        """
        if offset < self.next_offset:
            return False
        self._pending.append(offset)
        self.next_offset = offset + 1
        if offset in self._done:
            self._advance()
            return False
        return offset not in self._inherited

    def handed_out(self, offset: int) -> None:
        """A delivery of ``offset`` went to the subscriber."""
        self.in_flight.add(offset)

    def settled(self, offset: int) -> None:
        """A delivery handed out was acked or nacked."""
        self.in_flight.discard(offset)

    def done(self, offset: int) -> None:
        """``offset`` needs no delivery again."""
        pending = self._pending
        if pending and pending[0] == offset:
            # The common case, and the cheap one: the oldest record is done.
            pending.popleft()
        else:
            self._done.add(offset)
        self._advance()

    def _advance(self) -> None:
        pending, done = self._pending, self._done
        while pending and done and pending[0] in done:
            done.discard(pending.popleft())

    @property
    def outstanding(self) -> int:
        """Deliveries of this partition still running, this assignment's and inherited."""
        return len(self.in_flight) + len(self._inherited)

    @property
    def commit_point(self) -> int:
        """The offset the group may resume from: the first record not done yet."""
        return self._pending[0] if self._pending else self.next_offset

    @property
    def needs_commit(self) -> bool:
        return self.active and self.commit_point > self.committed

    # -- the same partition assigned again ---------------------------------------

    def inherit(self, previous: PartitionTracker) -> None:
        """Take over the calls ``previous`` still has running."""
        self._inherited = previous.in_flight | previous._inherited
        previous.successor = self

    def heir(self, offset: int) -> PartitionTracker | None:
        """The later tracker that inherited the delivery of ``offset``, if any."""
        heir = None
        tracker = self.successor
        while tracker is not None and offset in tracker._inherited:
            heir = tracker
            tracker = tracker.successor
        return heir

    def inherited_settled(self, offset: int, done: bool) -> bool:
        """An inherited delivery was acked (``done``) or nacked.

        Returns True when a nacked record was fetched already by this tracker and
        must now be handed out again.
        """
        self._inherited.discard(offset)
        if done:
            self.done(offset)
            return False
        return offset < self.next_offset and offset in self._pending
