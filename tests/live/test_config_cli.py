"""``toolbus config put|get|list|delete|load``: the command line against a real config service."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread
import pytest
from typer.testing import CliRunner, Result

import toolbus.cli.config
from tests.live.support import WEATHER_SERVICE, weather_tool
from toolbus.application.live.config_service import ConfigService, serving_config
from toolbus.cli import app
from toolbus.plugins import connect


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_CONFIG_STORE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def toolbus(*args: str, input: str | None = None) -> Result:
    return CliRunner().invoke(app, list(args), input=input)


@pytest.fixture
def config_service(live_nats: str, tmp_path: Path) -> Iterator[ConfigService]:
    """A config service on NATS, run by an event loop in a thread of its own."""
    with anyio.from_thread.start_blocking_portal() as portal:
        bus = portal.call(connect, live_nats)
        try:
            with portal.wrap_async_context_manager(
                serving_config(bus, tmp_path / "store.json")
            ) as service:
                yield service
        finally:
            portal.call(bus.close)


def test_memory_brokers_cannot_reach_a_config_service(scratch: Path) -> None:
    result = toolbus("config", "list")
    assert result.exit_code == 2
    assert "memory://, which lives inside one process" in result.output


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["put", "tool", "--value", "{}"], "is not TYPE/KEY"),
        (["put", "tool/x", "--value", "{nope"], "the value of tool/x is not valid JSON"),
        (["put", "tool/x", "--value", '{"a": 1, "a": 2}'], "key 'a' appears twice"),
        (["list", "tool/x"], "contains '/'"),
        (["load", "does-not-exist.json"], "does not exist"),
    ],
)
def test_bad_input_is_refused_before_anything_is_sent(
    scratch: Path, args: list[str], complaint: str
) -> None:
    result = toolbus("config", *args, "--broker", "nats://127.0.0.1:1")
    assert result.exit_code == 2
    assert complaint in result.output


@pytest.mark.broker
def test_no_config_service_is_a_clear_timeout(scratch: Path, live_nats: str) -> None:
    result = toolbus("config", "list", "--broker", live_nats, "--timeout", "0.5")
    assert result.exit_code == 1
    assert "no config service answered on persistent://toolbus/config/request" in result.output
    assert "toolbus serve config --store PATH" in result.output


@pytest.mark.broker
def test_put_get_list_delete_from_the_command_line(
    scratch: Path, live_nats: str, config_service: ConfigService
) -> None:
    broker = ("--broker", live_nats)

    put = toolbus(
        "config", "put", "tool-service/weather", *broker, input=json.dumps(WEATHER_SERVICE)
    )
    assert (put.exit_code, put.output) == (0, "stored tool-service/weather: version 1\n")
    tool = json.dumps(weather_tool(groups=["ops"]))
    assert toolbus("config", "put", "tool/weather", "--value", tool, *broker).exit_code == 0
    again = toolbus("config", "put", "tool/weather", "--value", tool, *broker)
    assert again.output == "tool/weather unchanged: version 2\n"

    got = toolbus("config", "get", "tool/weather", *broker)
    assert json.loads(got.output) == weather_tool(groups=["ops"])
    listed = toolbus("config", "list", *broker)
    assert listed.output == "tool-service/weather\ntool/weather\n"
    assert toolbus("config", "list", "tool", *broker).output == "tool/weather\n"

    refused = toolbus("config", "delete", "tool-service/weather", *broker)
    assert refused.exit_code == 2
    assert "change refused, nothing stored: invalid configuration (1 problem)" in refused.output
    assert "names tool-service 'weather', which is not configured" in refused.output

    missing = toolbus("config", "get", "tool/nope", *broker)
    assert missing.exit_code == 2
    assert "tool/nope is not in the configuration; tool has: weather" in missing.output

    deleted = toolbus("config", "delete", "tool/weather", *broker)
    assert deleted.output == "deleted tool/weather: version 3\n"
    assert config_service.current.version == 3


@pytest.mark.broker
def test_load_puts_a_whole_directory_as_one_version(
    scratch: Path, live_nats: str, config_service: ConfigService
) -> None:
    (scratch / "cfg" / "tool-service").mkdir(parents=True)
    (scratch / "cfg" / "tool").mkdir()
    (scratch / "cfg" / "tool-service" / "weather.json").write_text(json.dumps(WEATHER_SERVICE))
    (scratch / "cfg" / "tool" / "weather.json").write_text(json.dumps(weather_tool()))
    (scratch / "cfg" / "tool" / "forecast.json").write_text(json.dumps(weather_tool("forecast")))

    loaded = toolbus("config", "load", "cfg", "--broker", live_nats)

    assert loaded.exit_code == 0, loaded.output
    assert loaded.output == "loaded 3 items from cfg: version 1\n"
    assert sorted(config_service.current.snapshot["tool"]) == ["forecast", "weather"]

    (scratch / "cfg" / "tool" / "forecast.json").unlink()
    replaced = toolbus("config", "load", "cfg", "--replace", "--broker", live_nats)
    assert replaced.output == "loaded 2 items from cfg: version 2\n"
    assert sorted(config_service.current.snapshot["tool"]) == ["weather"]
