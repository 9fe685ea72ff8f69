"""Event fan-out: every subscriber gets every event; one that stops reading is dropped."""

from __future__ import annotations

import anyio
import pytest

from toolbus_gateway.events import OVERFLOW, Event, Topic

pytestmark = pytest.mark.anyio


async def test_each_subscriber_gets_each_event_in_order() -> None:
    topic = Topic()
    async with topic.subscribe() as first, topic.subscribe() as second:
        assert len(topic) == 2
        topic.publish(Event("a", 1))
        topic.publish(Event("b", 2))
        for stream in (first, second):
            assert [await stream.receive(), await stream.receive()] == [
                Event("a", 1),
                Event("b", 2),
            ]
    assert len(topic) == 0


async def test_a_subscriber_that_falls_behind_is_dropped_and_told() -> None:
    topic = Topic(buffer=2)
    async with topic.subscribe() as slow, topic.subscribe() as quick:
        for n in range(3):
            topic.publish(Event("tick", n))
            assert (await quick.receive()).data == n
        assert len(topic) == 1  # the slow one is gone, the quick one stays
        received = [event async for event in slow]
    assert received[:2] == [Event("tick", 0), Event("tick", 1)]
    assert received[2:] in ([], [OVERFLOW])


async def test_closing_ends_every_subscription_with_a_last_word() -> None:
    topic = Topic()
    async with topic.subscribe() as stream:
        topic.close(Event("closed", "bye"))
        assert [event async for event in stream] == [Event("closed", "bye")]
        async with topic.subscribe() as late:
            with anyio.fail_after(1):
                assert [event async for event in late] == []
