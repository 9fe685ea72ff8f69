"""The adapter is found through the plugin registry by URL scheme."""

from __future__ import annotations

import pytest

from toolbus.plugins import adapter_for, connect
from toolbus_nats import NatsBus

pytestmark = pytest.mark.anyio


def test_nats_urls_pick_this_adapter() -> None:
    for url in ("nats://127.0.0.1:4222", "nats+tls://broker:4222"):
        assert adapter_for(url).distribution == "toolbus-nats"


@pytest.mark.broker
async def test_connect_by_url(nats_url: str) -> None:
    bus = await connect(nats_url, {"name": "plugin-test"})
    try:
        assert isinstance(bus, NatsBus)
        assert bus.is_connected
        assert bus.options.name == "plugin-test"
    finally:
        await bus.close()
