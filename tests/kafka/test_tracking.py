"""Which offset a group may commit when acks arrive out of order (no broker needed)."""

from __future__ import annotations

from toolbus_kafka.subscription.tracking import PartitionTracker


def fetched(tracker: PartitionTracker, *offsets: int) -> None:
    for offset in offsets:
        assert tracker.accept(offset)


def test_a_fresh_partition_resumes_where_it_started() -> None:
    tracker = PartitionTracker(start=40)
    assert tracker.commit_point == 40
    assert not tracker.needs_commit


def test_acks_in_order_move_the_commit_point_past_each_record() -> None:
    tracker = PartitionTracker(start=0)
    fetched(tracker, 0, 1, 2)
    tracker.done(0)
    assert tracker.commit_point == 1
    tracker.done(1)
    tracker.done(2)
    assert tracker.commit_point == 3
    assert tracker.needs_commit


def test_an_older_record_in_flight_holds_the_commit_point_back() -> None:
    tracker = PartitionTracker(start=10)
    fetched(tracker, 10, 11, 12, 13)
    tracker.done(12)
    tracker.done(11)
    tracker.done(13)
    # 10 is still being handled: a crash now must redeliver it.
    assert tracker.commit_point == 10
    assert not tracker.needs_commit
    tracker.done(10)
    assert tracker.commit_point == 14


def test_gaps_in_offsets_do_not_stall_the_commit_point() -> None:
    # Compaction and transaction markers leave holes in a partition's offsets.
    tracker = PartitionTracker(start=100)
    fetched(tracker, 100, 104, 109)
    tracker.done(109)
    tracker.done(100)
    assert tracker.commit_point == 104
    tracker.done(104)
    assert tracker.commit_point == 110


def test_records_fetched_but_not_yet_handed_out_are_not_committed() -> None:
    tracker = PartitionTracker(start=0)
    fetched(tracker, 0, 1)
    tracker.done(0)
    assert tracker.commit_point == 1


def test_a_record_seen_before_is_refused() -> None:
    tracker = PartitionTracker(start=5)
    fetched(tracker, 5, 6)
    assert not tracker.accept(6)
    assert not tracker.accept(3)
    assert tracker.accept(7)


def test_counts_deliveries_in_flight() -> None:
    tracker = PartitionTracker(start=0)
    tracker.handed_out(0)
    tracker.handed_out(1)
    tracker.settled(0)
    assert tracker.in_flight == {1}
    assert tracker.outstanding == 1


def reassigned(previous: PartitionTracker) -> PartitionTracker:
    """The same partition given back after a rebalance, from the committed offset."""
    previous.active = False
    tracker = PartitionTracker(start=previous.commit_point)
    tracker.inherit(previous)
    return tracker


def test_a_call_still_running_is_not_handed_out_again_when_its_partition_returns() -> None:
    first = PartitionTracker(start=0)
    fetched(first, 0, 1)
    first.handed_out(0)
    first.handed_out(1)
    first.settled(1)
    first.done(1)  # 0 is still running when a rebalance takes the partition
    second = reassigned(first)
    assert second.outstanding == 1
    assert not second.accept(0)  # being handled already
    assert second.accept(1)  # never committed, so read again
    first.settled(0)
    heir = first.heir(0)
    assert heir is second
    assert not second.inherited_settled(0, done=True)
    assert second.outstanding == 0
    assert second.commit_point == 1


def test_an_inherited_call_acked_before_its_record_is_read_again_is_skipped() -> None:
    first = PartitionTracker(start=5)
    fetched(first, 5)
    first.handed_out(5)
    second = reassigned(first)
    first.settled(5)
    assert second.inherited_settled(5, done=True) is False
    assert not second.accept(5)
    assert second.commit_point == 6


def test_an_inherited_call_nacked_after_its_record_was_read_again_is_handed_out() -> None:
    first = PartitionTracker(start=0)
    fetched(first, 0)
    first.handed_out(0)
    second = reassigned(first)
    assert not second.accept(0)
    first.settled(0)
    assert second.inherited_settled(0, done=False) is True
    assert second.commit_point == 0


def test_inheritance_survives_several_rebalances() -> None:
    first = PartitionTracker(start=0)
    fetched(first, 0)
    first.handed_out(0)
    second = reassigned(first)
    third = reassigned(second)
    first.settled(0)
    assert first.heir(0) is third


def test_an_inactive_tracker_never_asks_for_a_commit() -> None:
    tracker = PartitionTracker(start=0)
    fetched(tracker, 0)
    tracker.done(0)
    tracker.active = False
    assert not tracker.needs_commit
