"""Live reload: agents follow the config service; running sessions keep their snapshot."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from tests.live.support import WEATHER_SERVICE, weather, weather_snapshot, weather_tool
from toolbus import AgentSession, Registry, Tools
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.config_service import (
    CONFIG_REQUEST_QUEUE,
    ConfigPublisher,
    ConfigService,
    serving_config,
)
from toolbus.application.live.config_store import ConfigStore
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.items import ConfigRejected, ConfigVersion
from toolbus.memory.bus import MemoryBus

pytestmark = pytest.mark.anyio


@dataclass
class Deployment:
    """A config service, the weather service, and one agent following the configuration."""

    config: ConfigClient
    service: ConfigService
    live: LiveRegistry
    tools: Tools


@pytest.fixture
async def deployment(memory_bus: MemoryBus, tmp_path: Path) -> AsyncIterator[Deployment]:
    async with AsyncExitStack() as stack:
        service = await stack.enter_async_context(serving_config(memory_bus, tmp_path / "s.json"))
        await stack.enter_async_context(running(memory_bus, weather))
        client = await stack.enter_async_context(ToolServiceClient(memory_bus, default_timeout=5))
        config = ConfigClient(client, user="ops")
        await config.put("tool-service/weather", WEATHER_SERVICE)
        await config.put("tool/weather", weather_tool(groups=["research"]))
        live = await stack.enter_async_context(LiveRegistry(memory_bus, announcements=False))
        yield Deployment(config, service, live, live.tools(client))


def offered(session: AgentSession) -> list[str]:
    return [tool.name for tool in session.available]


async def test_the_agent_starts_on_the_config_services_snapshot(deployment: Deployment) -> None:
    assert deployment.live.version == 2
    assert deployment.tools.registry is deployment.live.registry
    assert list(deployment.tools.registry.tools) == ["weather"]


async def test_a_running_session_keeps_its_snapshot_and_the_next_one_sees_the_change(
    deployment: Deployment,
) -> None:
    tools, live = deployment.tools, deployment.live
    async with AgentSession(tools, user="alice", groups=["research"]) as running_session:
        assert offered(running_session) == ["weather"]

        changed = await deployment.config.put("tool/weather", weather_tool(groups=["ops"]))
        await live.wait_until(lambda _: live.version == changed.version, timeout=5)

        # The session that was running goes on with what it started with...
        assert offered(running_session) == ["weather"]
        outcome = await running_session.call("weather", {"city": "Oslo"})
        assert outcome.ok, outcome.observation
        assert outcome.observation == "sunny in Oslo (metric)"

        # ...while the next one gets the new configuration: no restart.
        async with AgentSession(tools, user="bob", groups=["research"]) as next_session:
            assert offered(next_session) == []
        async with AgentSession(tools, user="carol", groups=["ops"]) as ops_session:
            assert offered(ops_session) == ["weather"]


async def test_an_invalid_change_is_refused_and_the_old_snapshot_stays_live(
    deployment: Deployment,
) -> None:
    live = deployment.live
    before: Registry = live.registry

    with pytest.raises(ConfigRejected, match="field 'group'"):
        await deployment.config.put("tool/weather", weather_tool(groups="ops"))  # type: ignore[arg-type]

    # A valid change after it proves that no push of the refused one happened.
    await deployment.config.put("tool/forecast", weather_tool("forecast", groups=["research"]))
    await live.wait_until(lambda r: "forecast" in r.tools, timeout=5)
    assert live.registry.tool("weather").groups == before.tool("weather").groups == ("research",)
    assert live.version == 3


async def test_an_agent_started_before_the_config_service_catches_up(
    memory_bus: MemoryBus, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    local = weather_snapshot(weather=weather_tool(groups=["local"]))
    caplog.set_level(logging.INFO, "toolbus.live")
    async with (
        ToolServiceClient(memory_bus) as client,
        LiveRegistry(memory_bus, local=local, announcements=False, fetch_timeout=0.05) as live,
    ):
        # Many deployments run no config service: one line at INFO, no warning.
        assert "no config service answered within 0.05 s" in caplog.text
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert live.version is None
        assert live.registry.tool("weather").groups == ("local",)

        async with serving_config(memory_bus, tmp_path / "s.json") as service:
            # The service pushes its current version when it starts.
            await live.wait_until(lambda _: live.version == 0, timeout=5)
            config = ConfigClient(client)
            await config.put("tool-service/weather", WEATHER_SERVICE)
            await config.put("tool/weather", weather_tool(groups=["pushed"]))
            await live.wait_until(lambda r: r.tool("weather").groups == ("pushed",), timeout=5)
            assert service.current.version == 2


async def test_a_starting_agent_gets_the_live_configuration_by_probing_not_by_request(
    memory_bus: MemoryBus, tmp_path: Path
) -> None:
    service = ConfigService(ConfigStore(tmp_path / "s.json"))
    publisher = ConfigPublisher(memory_bus, service, interval=3600)
    try:
        # Nothing serves the config service's (persistent) request queue: only the
        # push that answers the agent's probe can bring the version.
        async with anyio.create_task_group() as tasks:
            await tasks.start(publisher.run)
            with anyio.fail_after(10):
                async with LiveRegistry(memory_bus, announcements=False, fetch_timeout=30) as live:
                    assert live.version == 0
            publisher.stop()
    finally:
        service.close()
    assert publisher.published == 2  # at its start, and for the probe


async def test_an_agent_that_does_not_wait_sends_nothing_to_the_config_request_queue(
    memory_bus: MemoryBus,
) -> None:
    requests = await memory_bus.subscribe(CONFIG_REQUEST_QUEUE)
    async with LiveRegistry(memory_bus, wait_for_config=False) as live:
        await live.wait_until(lambda _: True)
    with anyio.move_on_after(0.2) as waited:
        await anext(aiter(requests))
    assert waited.cancelled_caught
    await requests.close()


async def test_the_config_service_overrides_the_local_file_entry_by_entry(
    memory_bus: MemoryBus, tmp_path: Path
) -> None:
    local = weather_snapshot(
        weather=weather_tool(groups=["local"]), forecast=weather_tool("forecast")
    )
    async with (
        serving_config(memory_bus, tmp_path / "s.json"),
        ToolServiceClient(memory_bus) as client,
        LiveRegistry(memory_bus, local=local, announcements=False) as live,
    ):
        config = ConfigClient(client)
        # The config service's snapshot is validated on its own: it names the service too.
        await config.put("tool-service/weather", WEATHER_SERVICE)
        await config.put("tool/weather", weather_tool(groups=["service"]))
        await live.wait_until(lambda r: r.tool("weather").groups == ("service",), timeout=5)
        assert live.registry.tool("forecast").groups == ("default",)  # still the local one

        await config.delete("tool/weather")
        await live.wait_until(lambda r: r.tool("weather").groups == ("local",), timeout=5)


async def test_a_version_this_agent_cannot_use_is_logged_and_not_applied(
    memory_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    async with LiveRegistry(memory_bus, follow_config=False, announcements=False) as live:
        good = ConfigVersion("store", 1, weather_snapshot())
        assert live.offer_config(good)
        before = live.registry

        # The config service knew an "mcp" tool type; this agent does not.
        alien = ConfigVersion(
            "store", 2, {"tool": {"m": {"type": "mcp", "name": "m", "description": "d"}}}
        )
        with caplog.at_level(logging.ERROR, "toolbus.live"):
            assert live.offer_config(alien)

        assert live.registry is before
        assert "config service version 2) not applied; the previous one stays live" in caplog.text
        assert not live.offer_config(good)  # older than what it has: ignored


async def test_listeners_and_attached_facades_follow_every_swap(memory_bus: MemoryBus) -> None:
    seen: list[Registry] = []
    async with (
        ToolServiceClient(memory_bus) as client,
        LiveRegistry(memory_bus, follow_config=False, announcements=False) as live,
    ):
        live.on_change(seen.append)
        tools, detached = live.tools(client), live.tools(client)
        live.detach(detached)

        live.offer_config(ConfigVersion("store", 1, weather_snapshot()))

        assert seen == [live.registry]
        assert tools.registry is live.registry
        assert detached.registry is not live.registry
        assert live.swaps == 1
        assert "config v1" in repr(live)


async def test_an_invalid_local_configuration_is_an_error_at_once(memory_bus: MemoryBus) -> None:
    with pytest.raises(ConfigError):
        LiveRegistry(memory_bus, local={"tool": {"x": weather_tool()}})


async def test_waiting_for_what_never_comes_times_out(memory_bus: MemoryBus) -> None:
    async with LiveRegistry(memory_bus, follow_config=False, announcements=False) as live:
        with pytest.raises(TimeoutError):
            await live.wait_until(lambda r: "never" in r.tools, timeout=0.01)
