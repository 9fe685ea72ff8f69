"""``toolbus call`` and ``toolbus tools`` in live mode, as processes, against real NATS.

The config service and the tool services run in the test process on the same
NATS server, as they would on other machines: the commands see the tools the
config service holds and the tools services announce, with no local
configuration.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from tests.live.support import WEATHER_SERVICE, weather, weather_tool
from tests.test_readme import FILE_BLOCK, README
from toolbus import ToolServiceClient, running, tool_service
from toolbus.application.live.companions import alongside
from toolbus.application.live.config_client import ConfigClient
from toolbus.application.live.config_service import serving_config
from toolbus_nats import NatsBus, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@tool_service(
    "shouter",
    request_queue="non-persistent://test/request/shouter",
    response_queue="non-persistent://test/response/shouter",
)
async def shout(text: str) -> str:
    """Say it louder."""
    return text.upper()


@pytest.fixture
async def remote(nats_url: str, tmp_path: Path) -> AsyncIterator[NatsBus]:
    """A config service holding the 'forecast' tool, its service, and an announced service."""
    bus = await connect(nats_url)
    try:
        async with (
            serving_config(bus, tmp_path / "store.json"),
            running(bus, weather, shout),
            alongside(bus, [shout], announce=True),
            ToolServiceClient(bus) as client,
        ):
            config = ConfigClient(client)
            await config.put("tool-service/weather", WEATHER_SERVICE)
            await config.put("tool/forecast", weather_tool("forecast"))
            yield bus
    finally:
        await bus.close()


async def toolbus(*args: str, cwd: Path) -> tuple[int, str, str]:
    script = Path(sys.executable).with_name("toolbus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    done = await anyio.run_process([str(script), *args], cwd=cwd, env=env, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


@pytest.mark.usefixtures("remote")
async def test_call_finds_a_tool_put_in_the_config_service(nats_url: str, tmp_path: Path) -> None:
    status, out, err = await toolbus(
        "call", "forecast", "-a", "city=Oslo", "--broker", nats_url, cwd=tmp_path
    )

    assert (status, out) == (0, "sunny in Oslo (metric)\n"), err


@pytest.mark.usefixtures("remote")
async def test_call_finds_a_tool_a_running_service_announces(nats_url: str, tmp_path: Path) -> None:
    status, out, err = await toolbus(
        "call", "shouter", "-a", "text=hi", "--broker", nats_url, cwd=tmp_path
    )

    assert (status, out) == (0, "HI\n"), err


@pytest.mark.usefixtures("remote")
async def test_tools_lists_configured_and_announced_tools(nats_url: str, tmp_path: Path) -> None:
    status, out, err = await toolbus(
        "tools", "--broker", nats_url, "--format", "json", "--wait", "1", cwd=tmp_path
    )

    assert status == 0, err
    names = {tool["name"] for tool in json.loads(out)}
    assert {"forecast", "shouter"} <= names


@pytest.mark.usefixtures("remote")
async def test_no_live_sees_only_the_local_configuration(nats_url: str, tmp_path: Path) -> None:
    status, _, err = await toolbus(
        "call", "forecast", "-a", "city=Oslo", "--broker", nats_url, "--no-live", cwd=tmp_path
    )

    assert status == 2
    assert "no tool named 'forecast'" in err


async def test_a_tool_nobody_offers_exits_2_after_the_wait(nats_url: str, tmp_path: Path) -> None:
    status, _, err = await toolbus(
        "call", "nowhere", "--broker", nats_url, "--wait", "0.5", cwd=tmp_path
    )

    assert status == 2
    assert "no tool named 'nowhere'" in err
    assert "looked for 0.5 s" in err and "--wait" in err


@pytest.mark.slow
async def test_the_readmes_broker_path_prints_the_answer_and_nothing_else(
    nats_url: str, tmp_path: Path
) -> None:
    # The README's service and configuration: the configuration names the service the
    # process announces, with a required config param its announced tool lacks.
    for name, body in FILE_BLOCK.findall(README.read_text()):
        (tmp_path / name).write_text(body)
    script = Path(sys.executable).with_name("toolbus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    env["PYTHONPATH"] = str(tmp_path)
    serving = await anyio.open_process(
        [str(script), "serve", "weather:weather", "--broker", nats_url], cwd=tmp_path, env=env
    )
    try:
        assert serving.stderr is not None
        lines = TextReceiveStream(serving.stderr)
        with anyio.fail_after(60):
            seen = ""
            while "announcing weather" not in seen:
                seen += await lines.receive()
        for _ in range(2):  # the second call is no different
            status, out, err = await toolbus(
                "call", "weather-us", "--config", "config.json", "--broker", nats_url,
                "-a", "city=Boston", cwd=tmp_path,
            )  # fmt: skip
            assert (status, out, err) == (0, "Boston: 70°F\n", "")
    finally:
        serving.terminate()
        await serving.wait()
        await serving.aclose()
