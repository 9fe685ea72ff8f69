"""Core NATS specifics beyond the conformance suite."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_nats import NatsBus, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
async def two_buses(nats_url: str) -> AsyncIterator[tuple[NatsBus, NatsBus]]:
    publisher, subscriber = await connect(nats_url), await connect(nats_url)
    yield publisher, subscriber
    await publisher.close()
    await subscriber.close()


async def test_a_subscription_is_live_when_subscribe_returns_every_time(
    two_buses: tuple[NatsBus, NatsBus],
) -> None:
    # nats-py can send the round trip that confirms a subscription ahead of the
    # subscription itself; one lost message in a few hundred tries would show it.
    publisher, subscriber = two_buses
    for attempt in range(200):
        queue = fresh_queue()
        subscription = await subscriber.subscribe(queue)
        await publisher.publish(queue, b"first", {"id": str(attempt)})
        with anyio.fail_after(2):
            delivery = await next_delivery(subscription, 2)
        assert delivery.properties["id"] == str(attempt)
        await subscription.close()


async def test_closing_a_subscription_wakes_every_reader(
    two_buses: tuple[NatsBus, NatsBus],
) -> None:
    _, subscriber = two_buses
    subscription = await subscriber.subscribe(fresh_queue(), group="workers")
    finished = 0

    async def read() -> None:
        nonlocal finished
        async for _ in subscription:
            pass
        finished += 1

    async with anyio.create_task_group() as readers:
        for _ in range(4):  # like a service host's workers
            readers.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        await subscription.close()
    assert finished == 4


async def test_a_cancelled_read_loses_no_message(two_buses: tuple[NatsBus, NatsBus]) -> None:
    publisher, subscriber = two_buses
    queue = fresh_queue()
    subscription = await subscriber.subscribe(queue)
    reader = aiter(subscription)
    with anyio.move_on_after(0.05):
        await anext(reader)  # nothing there yet: cancelled while waiting
    await publisher.publish(queue, b"kept", {"id": "1"})
    assert (await next_delivery(subscription, 5)).body == b"kept"
