"""Self-announcing services on the in-memory bus: appear, expire, withdraw, lose clashes."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests.live.support import FakeClock, echo, weather, weather_snapshot, weather_tool
from toolbus import ServiceHost, tool_service
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.live.announcements import (
    ANNOUNCEMENTS_QUEUE,
    PROBE_QUEUE,
    Announcer,
    announcing,
    service_tools,
)
from toolbus.application.live.companions import alongside, companions_for
from toolbus.application.live.config_service import ConfigPublisher, ConfigService
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.errors import ConfigError
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Withdrawal
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio

# Long enough never to fire during a test: announcements come from start-up and probes.
NEVER = 3600.0


@pytest.fixture
def broker() -> str:
    return f"memory://announce-{uuid.uuid4().hex}"


@pytest.fixture
async def agent_bus(broker: str) -> AsyncIterator[MemoryBus]:
    bus = await connect(broker)
    yield bus
    await bus.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def has(name: str) -> object:
    return lambda registry: name in registry.tools


def lacks(name: str) -> object:
    return lambda registry: name not in registry.tools


async def test_an_announced_service_is_called_with_no_configuration_at_all(
    agent_bus: MemoryBus,
) -> None:
    async with (
        ToolServiceClient(agent_bus) as client,
        LiveRegistry(agent_bus, follow_config=False) as live,
        running(agent_bus, echo),
        announcing(agent_bus, echo, interval=NEVER),
    ):
        await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        tools = live.tools(client)
        assert await tools.call("echo", {"text": "hi", "times": 2}) == "hi hi"
        assert live.registry.tool("echo").description == "Say the text back."


async def test_a_service_offers_new_tools_under_the_same_instance(agent_bus: MemoryBus) -> None:
    shout = {"name": "shout", "description": "Say it loudly.", "arguments": []}
    async with (
        LiveRegistry(agent_bus, follow_config=False) as live,
        announcing(agent_bus, echo, interval=NEVER) as [announcer],
    ):
        await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        instance = announcer.announcement.instance
        assert await announcer.offer({"shout": shout})
        await live.wait_until(has("shout"), timeout=5)  # type: ignore[arg-type]
        assert "echo" not in live.registry.tools
        assert announcer.announcement.instance == instance
        with pytest.raises(ConfigError):
            await announcer.offer({"bad": {"name": "bad"}})  # no description
        assert list(announcer.announcement.tools) == ["shout"]


async def test_a_graceful_stop_withdraws_at_once(agent_bus: MemoryBus, clock: FakeClock) -> None:
    async with LiveRegistry(agent_bus, follow_config=False, clock=clock) as live:
        async with running(agent_bus, echo), announcing(agent_bus, echo, interval=NEVER):
            await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        # The clock has not moved: this is the withdrawal, not the TTL.
        await live.wait_until(lacks("echo"), timeout=5)  # type: ignore[arg-type]
        assert live.announced == ()


async def test_a_crashed_service_vanishes_after_its_ttl_and_returns_on_restart(
    broker: str, agent_bus: MemoryBus, clock: FakeClock
) -> None:
    async with LiveRegistry(agent_bus, follow_config=False, clock=clock) as live:
        # The service's own connection to the broker, which "crashes" below.
        service_bus = await connect(broker)
        async with running(service_bus, echo):
            announcer = Announcer(service_bus, echo, interval=NEVER, ttl=30)
            async with anyio.create_task_group() as tasks:
                await tasks.start(announcer.run)
                await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
                await service_bus.close()  # the connection dies: no withdrawal gets out
                announcer.stop()
        assert "echo" in live.registry.tools

        clock.advance(29.9)
        assert live.expire() == []
        clock.advance(0.1)
        assert live.expire() == ["echo"]
        assert "echo" not in live.registry.tools

        # Restarted: it announces again and is back.
        async with running(agent_bus, echo), announcing(agent_bus, echo, interval=NEVER):
            await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]


async def test_expiry_runs_by_itself_when_due(agent_bus: MemoryBus) -> None:
    async with LiveRegistry(agent_bus, follow_config=False) as live:  # the real clock
        announcement = Announcer(agent_bus, echo, ttl=0.05).announcement
        await agent_bus.publish(ANNOUNCEMENTS_QUEUE, messages.encode(announcement))
        await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        await live.wait_until(lacks("echo"), timeout=5)  # type: ignore[arg-type]


async def test_heartbeats_keep_a_service_and_do_not_rebuild(
    agent_bus: MemoryBus, clock: FakeClock
) -> None:
    async with LiveRegistry(agent_bus, follow_config=False, clock=clock) as live:
        announcement = Announcer(agent_bus, echo, ttl=30).announcement
        assert live.offer(announcement)
        swaps = live.swaps
        for _ in range(5):
            clock.advance(20)
            assert not live.offer(announcement)
            assert live.expire() == []
        assert live.swaps == swaps
        assert "echo" in live.registry.tools


async def test_a_new_agent_asks_and_running_services_announce_at_once(
    agent_bus: MemoryBus,
) -> None:
    async with (
        running(agent_bus, echo),
        announcing(agent_bus, echo, interval=NEVER, probe_cooldown=0) as (ann,),
    ):
        assert ann.announced == 1
        # Started after the announcement: without a probe it would wait an hour.
        async with LiveRegistry(agent_bus, follow_config=False) as live:
            await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        assert ann.announced == 2


async def test_probes_close_together_share_one_announcement(agent_bus: MemoryBus) -> None:
    async with (
        running(agent_bus, echo),
        announcing(agent_bus, echo, interval=NEVER, probe_cooldown=0.2) as (ann,),
    ):
        seen = await agent_bus.subscribe(ANNOUNCEMENTS_QUEUE)
        for _ in range(5):
            await agent_bus.publish(PROBE_QUEUE, messages.encode(messages.Probe()))
        with anyio.fail_after(5):
            await anext(aiter(seen))
        ann.stop()
    assert ann.announced == 2  # the start-up one, and one for all five probes


async def test_configured_tools_win_clashes_and_each_is_said_once_at_debug(
    agent_bus: MemoryBus, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    @tool_service("impostor")
    async def impostor(user: str, config: dict[str, str], arguments: dict[str, str]) -> str:
        return "wrong"

    local = weather_snapshot(weather=weather_tool(groups=["configured"]))
    tools = {"weather": {"name": "weather", "description": "Not the configured one"}}
    announcer = Announcer(agent_bus, impostor, tools=tools, ttl=30)
    async with LiveRegistry(agent_bus, local=local, follow_config=False, clock=clock) as live:
        with caplog.at_level(logging.DEBUG, "toolbus.live"):
            for _ in range(3):
                live.offer(announcer.announcement)
                clock.advance(10)
            live.offer(Withdrawal("impostor", announcer.announcement.instance))
            live.offer(announcer.announcement)

        assert live.registry.tool("weather").groups == ("configured",)
        assert live.registry.tool("weather").service == "weather"
        said = [
            (r.levelno, r.getMessage())
            for r in caplog.records
            if r.name == "toolbus.live" and "announced by" in r.getMessage()
        ]
        clash = (
            "tool 'weather' (name 'weather') announced by tool service 'impostor' is ignored: "
            "the configuration already has the same key (configured entries take precedence)"
        )
        # What configuration is for is no warning. Once while it lasted, and once more
        # when it came back after the withdrawal.
        assert said == [(logging.DEBUG, clash), (logging.DEBUG, clash)]


async def test_a_clash_between_two_announcing_services_is_a_warning(
    agent_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    @tool_service("impostor")
    async def impostor(user: str, config: dict[str, str], arguments: dict[str, str]) -> str:
        return "wrong"

    tools = {"echo": {"name": "echo", "description": "Not the real echo"}}
    async with LiveRegistry(agent_bus, follow_config=False) as live:
        with caplog.at_level(logging.WARNING, "toolbus.live"):
            live.offer(Announcer(agent_bus, echo).announcement)
            live.offer(Announcer(agent_bus, impostor, tools=tools).announcement)

        assert live.registry.tool("echo").service == "echo"
        (record,) = [r for r in caplog.records if "impostor" in r.getMessage()]
        assert record.levelno == logging.WARNING


async def test_an_announcement_the_configured_service_overrides_is_said_once_at_debug(
    agent_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    local = weather_snapshot()
    # A tool for the configured weather service, without the config value it requires:
    # what `toolbus serve weather:weather` announces beside a config.json that configures
    # the service with a required config param.
    announcer = Announcer(
        agent_bus, weather, tools={"forecast": {"name": "forecast", "description": "d"}}
    )
    async with LiveRegistry(agent_bus, local=local, follow_config=False) as live:
        with caplog.at_level(logging.DEBUG, "toolbus.live"):
            live.offer(announcer.announcement)
            live.offer(announcer.announcement)
        assert "forecast" not in live.registry.tools
        (record,) = [r for r in caplog.records if "announcement of 'weather' ignored" in r.message]
        assert record.levelno == logging.DEBUG
        assert "required config param" in record.getMessage()


async def test_an_announcement_invalid_in_itself_is_a_warning(
    agent_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Announcer(agent_bus, echo).announcement
    broken = dataclasses.replace(
        broken, tools={"echo": {**broken.tools["echo"], "group": "not-a-list"}}
    )
    async with LiveRegistry(agent_bus, follow_config=False) as live:
        with caplog.at_level(logging.DEBUG, "toolbus.live"):
            live.offer(broken)

        (record,) = [r for r in caplog.records if "announcement of 'echo' ignored" in r.message]
        assert record.levelno == logging.WARNING


async def test_junk_on_the_announcements_queue_is_ignored(
    agent_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    async with LiveRegistry(agent_bus, follow_config=False) as live:
        await agent_bus.publish(ANNOUNCEMENTS_QUEUE, b"junk")
        await agent_bus.publish(ANNOUNCEMENTS_QUEUE, messages.encode(messages.Probe()))
        await agent_bus.publish(
            ANNOUNCEMENTS_QUEUE, messages.encode(Announcer(agent_bus, echo).announcement)
        )
        await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
    assert "ignored a message on non-persistent://toolbus/tools/announcements" in caplog.text


async def test_a_service_that_cannot_be_announced_says_so_at_once(memory_bus: MemoryBus) -> None:
    @tool_service("units", config_params=[{"name": "units", "required": True}])
    async def needs_units(user: str, config: dict[str, str], arguments: dict[str, str]) -> str:
        return ""

    # A required config value, which the tool derived from the service cannot have.
    with pytest.raises(ConfigError, match="required config param"):
        Announcer(memory_bus, needs_units)
    with pytest.raises(ValueError, match="interval must be positive"):
        Announcer(memory_bus, echo, interval=0)


def test_services_describe_their_own_tool() -> None:
    @tool_service("bare")
    async def bare(user: str, config: dict[str, str], arguments: dict[str, str]) -> str:
        return ""

    (tool,) = service_tools(bare).values()
    assert tool["description"] == "Call the bare tool service"
    assert "arguments" not in tool
    assert service_tools(echo)["echo"]["description"] == "Say the text back."


async def test_a_failing_publish_is_logged_and_the_service_goes_on(
    memory_bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    announcer = Announcer(memory_bus, echo, announcements_queue="bad queue name!")
    assert not await announcer.announce()
    assert not await announcer.withdraw()
    assert "could not announce" in caplog.text
    assert "agents drop it when its TTL runs out" in caplog.text


async def test_alongside_publishes_config_and_announces_everything_else(
    memory_bus: MemoryBus, tmp_path: Path
) -> None:
    config = ConfigService.at(tmp_path / "s.json")
    defaults = {"tool": {"say": {"service": "echo", "name": "say", "description": "Say it"}}}
    try:
        made = companions_for(memory_bus, [config, echo], defaults=defaults)
        assert [type(c) for c in made] == [ConfigPublisher, Announcer]
        assert isinstance(made[1], Announcer)
        assert list(made[1].announcement.tools) == ["say"]
        assert len(companions_for(memory_bus, [config, echo], announce=False)) == 1

        async with LiveRegistry(memory_bus, follow_config=False) as live:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(running(memory_bus, config, echo))
                await stack.enter_async_context(
                    alongside(memory_bus, [config, echo], defaults=defaults, interval=NEVER)
                )
                await live.wait_until(has("say"), timeout=5)  # type: ignore[arg-type]
                assert "config" not in live.registry.services
            await live.wait_until(lacks("say"), timeout=5)  # type: ignore[arg-type]
    finally:
        config.close()


async def test_host_and_announcer_side_by_side_without_helpers(memory_bus: MemoryBus) -> None:
    # What an embedding does by hand: host first, announcer next to it.
    host = ServiceHost(memory_bus, echo)
    announcer = Announcer(memory_bus, echo, interval=NEVER)
    async with (
        LiveRegistry(memory_bus, follow_config=False) as live,
        anyio.create_task_group() as tasks,
    ):
        await tasks.start(host.serve)
        await tasks.start(announcer.run)
        await live.wait_until(has("echo"), timeout=5)  # type: ignore[arg-type]
        announcer.stop()
        await live.wait_until(lacks("echo"), timeout=5)  # type: ignore[arg-type]
        host.stop()
