"""Readers standing by: items taken in the writer's call, while the buffer holds none."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pytest

from toolbus._internal.delivery_buffer import DeliveryBuffer

pytestmark = pytest.mark.anyio

T = TypeVar("T")


def keeping(into: list[T]) -> Callable[[T], bool]:
    """A reader standing by that takes every item into ``into``."""

    def take(item: T) -> bool:
        into.append(item)
        return True

    return take


async def test_an_item_goes_to_a_reader_standing_by_and_is_never_held() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer(10)
    taken: list[str] = []
    buffer.stand_by(keeping(taken))

    assert buffer.offer("first") is False

    assert taken == ["first"]
    assert len(buffer) == 0


async def test_an_item_declined_is_held_for_the_readers() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer(10)
    buffer.stand_by(lambda item: False)

    buffer.offer("held")

    assert await buffer.get() == "held"


async def test_while_items_are_held_new_ones_queue_behind_them_in_order() -> None:
    buffer: DeliveryBuffer[str] = DeliveryBuffer(10)
    room = [False]
    taken: list[str] = []

    def take(item: str) -> bool:
        if room[0]:
            taken.append(item)
        return room[0]

    buffer.stand_by(take)
    buffer.offer("a")  # declined: held
    room[0] = True
    buffer.offer("b")  # a is held, so b waits behind it, though there is room now

    assert taken == []
    assert [await buffer.get(), await buffer.get()] == ["a", "b"]
    buffer.offer("c")  # nothing held any more
    assert taken == ["c"]


async def test_readers_standing_by_are_offered_items_in_turn() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(10)
    first: list[int] = []
    second: list[int] = []
    buffer.stand_by(keeping(first))
    buffer.stand_by(keeping(second))

    for item in range(4):
        buffer.offer(item)

    assert (first, second) == ([0, 2], [1, 3])


async def test_the_next_reader_standing_by_takes_what_one_declines() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(10)
    taken: list[int] = []
    buffer.stand_by(lambda item: False)
    buffer.stand_by(keeping(taken))

    buffer.offer(7)

    assert taken == [7]
    assert len(buffer) == 0


async def test_a_reader_that_stood_down_or_a_closed_buffer_is_offered_nothing() -> None:
    buffer: DeliveryBuffer[int] = DeliveryBuffer(10)
    taken: list[int] = []
    take = keeping(taken)
    buffer.stand_by(take)
    buffer.stand_down(take)
    buffer.offer(1)
    buffer.stand_by(take)
    buffer.close()
    buffer.offer(2)

    assert taken == []
