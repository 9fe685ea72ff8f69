"""``toolbus serve config --store PATH`` and announcing ``toolbus serve``, as real processes."""

from __future__ import annotations

import json
import signal
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from tests.live.support import WEATHER_SERVICE, weather_tool
from tests.live.test_processes import started
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.registry import LiveRegistry
from toolbus.plugins import connect

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.broker,
    pytest.mark.slow,
]

TOOLBUS = str(Path(sys.executable).with_name("toolbus"))


async def test_the_config_service_process_keeps_its_store_across_restarts(
    live_nats: str, tmp_path: Path
) -> None:
    store = tmp_path / "config-store.json"
    serve = [TOOLBUS, "serve", "config", "--store", str(store), "--broker", live_nats]
    bus = await connect(live_nats)
    try:
        async with ToolServiceClient(bus) as client:
            config = ConfigClient(client)
            async with started(serve, "changes are pushed on", cwd=tmp_path) as first:
                await config.put("tool-service/weather", WEATHER_SERVICE)
                await config.put("tool/weather", json.dumps(weather_tool()))
                before = await config.snapshot()

                # One config service per store: a second one is refused.
                second = await anyio.run_process(serve, check=False, cwd=tmp_path)
                assert second.returncode == 2
                assert b"is in use by another process" in second.stderr

                first.send_signal(signal.SIGTERM)
                assert await first.wait() == 0

            async with started(serve, "at version 2", cwd=tmp_path):
                after = await config.snapshot()
                assert after == before
                assert json.loads(await config.get("tool/weather")) == weather_tool()
                assert (await config.delete("tool/weather")).version == 3
    finally:
        await bus.close()


async def test_a_served_plugin_announces_its_tools_and_withdraws_on_sigterm(
    live_nats: str, tmp_path: Path
) -> None:
    # A private copy of the joke service on queues of its own, so that other
    # tests' joke services on this broker do not answer for it.
    tag = uuid.uuid4().hex[:8]
    (tmp_path / f"joke_{tag}.py").write_text(
        "from toolbus import tool_service\n"
        f"@tool_service('joke-{tag}')\n"
        "async def joke(topic: str) -> str:\n"
        '    """Tell a joke about a topic."""\n'
        "    return f'a joke about {topic}'\n"
    )
    serve = [TOOLBUS, "serve", f"joke_{tag}:joke", "--broker", live_nats]
    serve += ["--announce-interval", "600"]
    name = f"joke-{tag}"
    bus = await connect(live_nats)
    try:
        async with (
            ToolServiceClient(bus, default_timeout=10) as client,
            LiveRegistry(bus, follow_config=False) as live,
        ):
            tools = live.tools(client)
            async with started(serve, f"announcing {name}", path=tmp_path) as process:
                await live.wait_until(lambda r: name in r.tools, timeout=30)
                assert await tools.call(name, {"topic": "cats"}) == "a joke about cats"
                assert live.registry.tool(name).description == "Tell a joke about a topic."

                process.send_signal(signal.SIGTERM)
                await live.wait_until(lambda r: name not in r.tools, timeout=30)
                assert await process.wait() == 0
    finally:
        await bus.close()


def test_store_without_the_config_service_is_refused(tmp_path: Path) -> None:
    import subprocess

    result = subprocess.run(
        [TOOLBUS, "serve", "joke-service", "--store", str(tmp_path / "s.json")],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "is the config service's store; add 'config' to the services" in result.stderr
