"""``open_tools(..., live=True)``: the quickest start, following the bus."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

from tests.live.support import WEATHER_SERVICE, echo, weather, weather_tool
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.tools import Tools
from toolbus.application.live.announcements import announcing
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.config_service import serving_config
from toolbus.memory.bus import connect
from toolbus.runtime import open_tools

pytestmark = pytest.mark.anyio


async def until_offered(tools: Tools, *names: str) -> None:
    # Tools has no change event of its own; yield to the follower until it swapped.
    with anyio.fail_after(5):
        while not all(name in tools.registry.tools for name in names):
            await anyio.lowlevel.checkpoint()


async def test_open_tools_follows_the_config_service_and_announcements(tmp_path: Path) -> None:
    broker = f"memory://open-tools-{uuid.uuid4().hex}"
    bus = await connect(broker)
    try:
        async with (
            serving_config(bus, tmp_path / "s.json"),
            running(bus, weather, echo),
            ToolServiceClient(bus) as client,
            open_tools(broker, {}, live=True) as tools,  # nothing configured locally
        ):
            config = ConfigClient(client)
            await config.put("tool-service/weather", WEATHER_SERVICE)
            await config.put("tool/weather", weather_tool())
            async with announcing(bus, echo):
                await until_offered(tools, "weather", "echo")
                assert await tools.call("weather", {"city": "Rome"}) == "sunny in Rome (metric)"
                assert await tools.call("echo", {"text": "hi"}) == "hi"
    finally:
        await bus.close()
