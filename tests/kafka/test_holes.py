"""Holes in a partition's offsets: waited for, or taken for real gaps (no broker needed)."""

from __future__ import annotations

from toolbus_kafka.subscription.holes import HoleWatch

PARTITION = ("topic", 0)


def test_consecutive_offsets_are_all_read() -> None:
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 10, [10, 11, 12], now=0.0) == (3, None)


def test_a_batch_stored_after_a_later_one_is_waited_for_not_skipped() -> None:
    # Offsets 12-13 were handed out, but their batch is not stored yet; 14-15 are.
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 10, [10, 11, 14, 15], now=0.0) == (2, 12)
    # Read again from 12 a moment later: still missing, so still not past it.
    assert holes.readable(PARTITION, 12, [14, 15], now=0.1) == (0, 12)
    # Stored now: read in order.
    assert holes.readable(PARTITION, 12, [12, 13, 14, 15], now=0.2) == (4, None)


def test_a_hole_that_stays_open_is_a_real_gap_and_reading_goes_on() -> None:
    # Compaction and transaction markers leave holes that never fill.
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 5, [7, 8], now=1.0) == (0, 5)
    assert holes.readable(PARTITION, 5, [7, 8], now=1.4) == (0, 5)
    assert holes.readable(PARTITION, 5, [7, 8], now=1.5) == (2, None)


def test_each_hole_gets_its_own_wait() -> None:
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 0, [2, 3], now=0.0) == (0, 0)
    # The first hole turned out real; the next one, just found, is waited for.
    assert holes.readable(PARTITION, 0, [2, 3, 6], now=0.6) == (2, 4)
    assert holes.readable(PARTITION, 4, [6], now=0.7) == (0, 4)


def test_a_filled_hole_is_forgotten() -> None:
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 0, [1], now=0.0) == (0, 0)
    assert holes.readable(PARTITION, 0, [0, 1], now=0.1) == (2, None)
    # Much later a new hole at another offset: its wait starts now, not at the old one.
    assert holes.readable(PARTITION, 2, [3], now=9.0) == (0, 2)


def test_partitions_wait_apart() -> None:
    holes = HoleWatch(patience=0.5)
    other = ("topic", 1)
    assert holes.readable(PARTITION, 0, [1], now=0.0) == (0, 0)
    assert holes.readable(other, 0, [1], now=0.4) == (0, 0)
    assert holes.readable(PARTITION, 0, [1], now=0.5) == (1, None)
    assert holes.readable(other, 0, [1], now=0.5) == (0, 0)


def test_records_read_before_are_left_to_the_caller() -> None:
    # A stale record below the expected offset is neither a hole nor a reason to stop.
    holes = HoleWatch(patience=0.5)
    assert holes.readable(PARTITION, 5, [4, 5, 6], now=0.0) == (3, None)
