"""While RabbitMQ cannot be reached, a process keeps its event loop and its background work.

The connection is cut (and held down) by a TCP proxy between the client and the
session's node: every publish during the cut fails, at once on a non-persistent
queue, after ``publish_timeout`` on a persistent one.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from yarl import URL

from tests.support.tcp_proxy import TcpProxy
from toolbus import tool_service
from toolbus.application.live.agent_presence import AgentPresence
from toolbus.application.live.announcements import Announcer
from toolbus.application.live.config_service import ConfigPublisher, ConfigService
from toolbus_rabbitmq import RabbitMQBus, RabbitMQUnavailable, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
def proxy(rabbitmq_url: str) -> Iterator[TcpProxy]:
    port = URL(rabbitmq_url).port
    assert port is not None
    with TcpProxy(port) as running:
        yield running


@pytest.fixture
async def proxied(proxy: TcpProxy) -> AsyncIterator[RabbitMQBus]:
    """A bus connected through the proxy, reconnecting every 0.1 s."""
    bus = await connect(
        f"amqp://127.0.0.1:{proxy.port}", {"reconnect_interval": 0.1, "publish_timeout": 1.5}
    )
    try:
        yield bus
    finally:
        await bus.close()


async def until_connected(bus: RabbitMQBus) -> None:
    with anyio.fail_after(30):
        await bus.connection.connected.wait()


async def test_a_persistent_publish_waits_for_the_broker_without_taking_the_event_loop(
    proxied: RabbitMQBus, proxy: TcpProxy
) -> None:
    queue = f"persistent://test/outage/{uuid.uuid4().hex[:8]}"
    await proxied.publish(queue, b"before")  # the exchange and the channel exist
    proxy.cut()
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(tick)
        with anyio.fail_after(10), pytest.raises(RabbitMQUnavailable, match="publish_timeout"):
            await proxied.publish(queue, b"during")
        tasks.cancel_scope.cancel()
    # About 150 ticks fit in the 1.5 s the publish waited; a publish that retried
    # without pause would have left the other tasks none.
    assert ticks > 30, ticks
    proxy.restore()
    await until_connected(proxied)
    await proxied.publish(queue, b"after")


def companions(bus: RabbitMQBus, tmp_path: Path) -> list[Any]:
    """An announcer, an agent service's presence and a config publisher, each publishing
    every 0.2 s."""

    @tool_service(f"outage-{uuid.uuid4().hex[:8]}")
    async def echo(text: str) -> str:
        return text

    config = ConfigService.at(tmp_path / "config-store.json")
    return [
        Announcer(bus, echo, interval=0.2),
        AgentPresence(bus, "non-persistent://t/o/agent", "non-persistent://t/o/a", interval=0.2),
        ConfigPublisher(bus, config, interval=0.2),
    ]


def published(companion: Any) -> int:
    return int(getattr(companion, "announced", getattr(companion, "published", 0)))


async def test_background_publishing_carries_on_through_an_outage(
    proxied: RabbitMQBus, proxy: TcpProxy, tmp_path: Path
) -> None:
    running = companions(proxied, tmp_path)
    async with AsyncExitStack() as stack:
        tasks = await stack.enter_async_context(anyio.create_task_group())
        for companion in running:
            await tasks.start(companion.run)
        stack.callback(lambda: [companion.stop() for companion in running])
        proxy.cut()
        before = [published(companion) for companion in running]
        # Held down for five intervals: each companion fails to publish several times.
        await anyio.sleep(1.0)
        assert [published(companion) for companion in running] == before
        proxy.restore()
        await until_connected(proxied)
        with anyio.fail_after(10):
            while True:
                if all(published(c) > b for c, b in zip(running, before, strict=True)):
                    break
                await anyio.sleep(0.05)  # they publish every 0.2 s: look at that pace


async def test_a_lost_connection_is_said_once_in_one_line(
    proxied: RabbitMQBus, proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    proxy.cut()
    with anyio.fail_after(10):
        while True:
            if not proxied.connected:
                break
            await anyio.sleep(0.01)  # the client notices the reset: look at that pace
    # A few reconnection attempts fail meanwhile.
    await anyio.sleep(0.5)
    proxy.restore()
    await until_connected(proxied)
    records = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records]
    lost = [r for r in records if "lost the connection" in r.getMessage()]
    assert [r.name for r in lost] == ["toolbus.rabbitmq"], [r.getMessage() for r in records]
    restated = [r for r in records if r.name.startswith("aiormq") and "close" in r.getMessage()]
    assert not restated, [r.getMessage() for r in restated]
