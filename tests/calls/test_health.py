"""Readiness of served services, as /readyz reports it."""

from __future__ import annotations

import uuid

import anyio
import pytest

from toolbus import ServiceHost, tool_service
from toolbus.application.calls.health import Readiness, ServingHealth
from toolbus.memory.bus import connect

pytestmark = pytest.mark.anyio


@tool_service("echo")
async def echo(text: str) -> str:
    return text


async def test_ready_only_while_every_host_is_subscribed_and_not_stopping() -> None:
    bus = await connect(f"memory://health-{uuid.uuid4().hex}")
    health = ServingHealth()
    assert health() == Readiness(False, {"broker": "not connected yet"})
    host = ServiceHost(bus, echo)
    health.attach(bus, [host])
    assert health() == Readiness(False, {"broker": "ok", "service echo": "starting"})

    async with anyio.create_task_group() as serving:
        await serving.start(host.serve)
        assert health() == Readiness(True, {"broker": "ok", "service echo": "ok"})
        host.stop()
        assert health() == Readiness(False, {"broker": "ok", "service echo": "stopping"})
    await bus.close()
