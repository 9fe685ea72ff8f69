"""The server's max payload: known to the bus, enforced before anything is sent."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.nats.server import MAX_PAYLOAD
from toolbus import ToolServiceClient, running
from toolbus.domain.errors import MessageTooLarge
from toolbus.testing.conformance import echo_service, fresh_queue, next_delivery
from toolbus_nats import NatsBus, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
async def bus(nats_url: str) -> AsyncIterator[NatsBus]:
    bus = await connect(nats_url)
    yield bus
    await bus.close()


async def test_the_bus_knows_the_server_max_payload(bus: NatsBus) -> None:
    assert bus.max_message_size == MAX_PAYLOAD


@pytest.mark.parametrize("persistent", [False, True], ids=["core", "jetstream"])
async def test_a_message_over_the_limit_fails_naming_the_limit_and_the_fix(
    bus: NatsBus, persistent: bool
) -> None:
    queue = fresh_queue(persistent)
    subscription = await bus.subscribe(queue, group="g")
    with pytest.raises(MessageTooLarge) as caught:
        await bus.publish(queue, b"x" * (MAX_PAYLOAD + 1), {"id": "big"})
    message = str(caught.value)
    assert f"{MAX_PAYLOAD:,}" in message and "max_payload" in message
    # Refused before sending: the connection is still fine.
    await bus.publish(queue, b"small", {"id": "small"})
    delivery = await next_delivery(subscription, 10)
    assert delivery.body == b"small"
    await delivery.ack()


async def test_properties_count_towards_the_limit(bus: NatsBus) -> None:
    with pytest.raises(MessageTooLarge):
        await bus.publish(fresh_queue(), b"x" * (MAX_PAYLOAD - 20), {"id": "ü" * 20})


async def test_a_call_too_large_for_the_broker_fails_at_once(bus: NatsBus) -> None:
    service = echo_service()
    async with running(bus, service), ToolServiceClient(bus) as client:
        with pytest.raises(MessageTooLarge, match="max_payload"):
            await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                arguments={"text": "x" * MAX_PAYLOAD},
            )
        assert client.pending == 0
