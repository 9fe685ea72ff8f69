"""A nats-server without JetStream: persistent queues fail with one clear toolbus error.

The error a caller catches is the adapter's ``JetStreamError`` (a ``ToolbusError``)
saying how to enable JetStream, never an ExceptionGroup from a task group inside.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import toolbus
from tests.nats.server import NatsServer
from toolbus import tool_service
from toolbus.application.calls.host import running
from toolbus_nats import JetStreamError, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
def core_only_nats(tmp_path: Path) -> Iterator[str]:
    server = NatsServer(tmp_path, jetstream=False)
    with server.running():
        yield server.url


@tool_service(
    "stock",
    request_queue="persistent://shop/request/stock",
    response_queue="non-persistent://shop/response/stock",
)
async def stock(sku: str) -> int:
    return 1


async def test_live_tools_raise_one_toolbus_error_saying_how_to_enable_jetstream(
    core_only_nats: str,
) -> None:
    # The config service's request queue is persistent.
    with pytest.raises(JetStreamError) as raised:
        async with toolbus.open_tools(core_only_nats, live=True):
            pass

    assert "-js" in str(raised.value)
    assert "JetStream" in str(raised.value)


async def test_serving_a_persistent_queue_raises_the_toolbus_error_itself(
    core_only_nats: str,
) -> None:
    bus = await connect(core_only_nats)
    try:
        with pytest.raises(JetStreamError, match="-js"):
            async with running(bus, stock):
                pass
    finally:
        await bus.close()
