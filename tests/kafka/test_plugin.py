"""The Kafka adapter is found through the plugin registry by URL scheme."""

from __future__ import annotations

import anyio
import pytest

import toolbus
from toolbus.plugins import adapter_for
from toolbus_kafka import KafkaBus

pytestmark = pytest.mark.anyio


def test_kafka_urls_pick_this_adapter() -> None:
    assert adapter_for("kafka://127.0.0.1:9092").distribution == "toolbus-kafka"


@pytest.mark.broker
async def test_connect_by_url(kafka_url: str) -> None:
    bus = await toolbus.connect(kafka_url)
    try:
        assert isinstance(bus, KafkaBus)
        queue = "persistent://plugin-test/q/by-url"
        subscription = await bus.subscribe(queue, group="by-url")
        await bus.publish(queue, b"found by its scheme", {"id": "1"})
        with anyio.fail_after(30):
            delivery = await anext(aiter(subscription))
        assert delivery.body == b"found by its scheme"
        await delivery.ack()
        await subscription.close()
    finally:
        await bus.close()
