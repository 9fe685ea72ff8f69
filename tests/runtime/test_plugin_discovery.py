"""Plugins are found through entry points: broker adapters by URL scheme, tool plugins.

Entry points are the boundary between toolbus and what is installed, so a test
that wants "nats is not installed" or "a plugin is broken" replaces the answer
of ``toolbus.plugins.installed.entry_points`` and nothing else.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import logging
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from pydantic import Field

import toolbus.plugins.installed as installation
from toolbus import tool_service
from toolbus.domain.errors import PluginError
from toolbus.memory import connect as memory_connect
from toolbus.memory.bus import MemoryBus
from toolbus.plugins import (
    ADAPTER_GROUP,
    COMMAND_GROUP,
    LLM_GROUP,
    PLUGIN_GROUP,
    POLICY_GROUP,
    STATE_GROUP,
    AdapterInfo,
    ToolRegistrar,
    adapter_for,
    connect,
    hookimpl,
    installed_plugins,
    load_tool_plugins,
)
from toolbus.runtime import build_registry, resolve_service
from toolbus.settings import Settings
from toolbus.testing import ToolTestKit

EntryPoints = Callable[[str], Sequence[metadata.EntryPoint]]
REAL_ENTRY_POINTS: EntryPoints = installation.entry_points
FIRST_PARTY_ADAPTERS = ("nats", "pulsar", "kafka", "rabbitmq")


def installed(group: str) -> dict[str, metadata.EntryPoint]:
    return {ep.name: ep for ep in metadata.entry_points(group=group)}


def replace_entry_points(
    monkeypatch: pytest.MonkeyPatch,
    *,
    without: dict[str, set[str]] | None = None,
    extra: dict[str, list[metadata.EntryPoint]] | None = None,
) -> None:
    """Pretend some entry points are not installed, or that more are."""

    def entry_points(group: str) -> Sequence[metadata.EntryPoint]:
        hidden = (without or {}).get(group, set())
        kept = [ep for ep in REAL_ENTRY_POINTS(group) if ep.name not in hidden]
        return (*kept, *(extra or {}).get(group, []))

    monkeypatch.setattr(installation, "entry_points", entry_points)


# --- broker adapters ----------------------------------------------------------------


def test_the_memory_adapter_is_registered_through_its_entry_point() -> None:
    assert installed(ADAPTER_GROUP)["memory"].value == "toolbus.memory.plugin"

    info = adapter_for("memory://anything")

    assert isinstance(info, AdapterInfo)
    assert "memory" in info.schemes
    assert info.connect is memory_connect
    assert info.distribution == "toolbus"


def test_without_its_entry_point_the_memory_adapter_is_not_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Proof that nothing in the core names the in-memory bus directly.
    replace_entry_points(monkeypatch, without={ADAPTER_GROUP: {"memory"}})

    with pytest.raises(PluginError, match="no broker adapter for memory://"):
        adapter_for("memory://")


@pytest.mark.anyio
async def test_connect_picks_the_adapter_by_scheme() -> None:
    bus = await connect("memory://plugin-discovery", {"buffer_size": 4})
    try:
        assert isinstance(bus, MemoryBus)
        assert bus.broker.buffer_size == 4
    finally:
        await bus.close()


def test_an_unknown_scheme_names_the_installed_adapters() -> None:
    with pytest.raises(PluginError) as caught:
        adapter_for("carrier-pigeon://coop:1")

    message = str(caught.value)
    assert "carrier-pigeon://" in message
    names = sorted(installed(ADAPTER_GROUP))
    assert f"installed adapters: {', '.join(names)}" in message
    assert "install a plugin that provides it" in message


def test_a_url_without_a_scheme_says_what_a_broker_url_looks_like() -> None:
    with pytest.raises(PluginError, match="has no scheme") as caught:
        adapter_for("127.0.0.1:4222")

    assert "memory://" in str(caught.value)
    assert "nats://" in str(caught.value)


@pytest.mark.parametrize("scheme", FIRST_PARTY_ADAPTERS)
def test_a_missing_first_party_adapter_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, scheme: str
) -> None:
    replace_entry_points(monkeypatch, without={ADAPTER_GROUP: {scheme}})

    with pytest.raises(PluginError) as caught:
        adapter_for(f"{scheme}://127.0.0.1:1234")

    message = str(caught.value)
    assert f"pip install 'toolbus[{scheme}]'" in message
    assert scheme not in message.split("installed adapters:")[1]
    assert "memory" in message.split("installed adapters:")[1]


@pytest.mark.anyio
async def test_connect_to_a_missing_adapter_raises_before_touching_the_network(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replace_entry_points(monkeypatch, without={ADAPTER_GROUP: {"nats"}})

    with pytest.raises(PluginError, match=r"pip install 'toolbus\[nats\]'"):
        await connect("nats://127.0.0.1:4222")


def test_an_adapter_that_fails_to_import_is_reported_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    broken = metadata.EntryPoint("smoke", "toolbus_no_such_adapter_module", ADAPTER_GROUP)
    replace_entry_points(monkeypatch, extra={ADAPTER_GROUP: [broken]})

    with pytest.raises(PluginError, match="broker adapter 'smoke' failed to load"):
        adapter_for("smoke://somewhere")


def test_only_the_adapter_the_url_names_is_imported() -> None:
    # A fresh interpreter: in this one, other tests may have imported adapters.
    script = textwrap.dedent(
        """
        import json, sys
        from toolbus.plugins import adapter_for, installed_plugins, load_tool_plugins
        adapter_for("memory://")
        load_tool_plugins()
        installed_plugins()
        print(json.dumps(sorted(sys.modules)))
        """
    )
    child = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert child.returncode == 0, child.stderr
    modules = set(json.loads(child.stdout))
    for name in installed(ADAPTER_GROUP):
        if name == "memory":
            continue
        package = installed(ADAPTER_GROUP)[name].value.split(":")[0].split(".")[0]
        assert package not in modules, f"{package} was imported without being asked for"
    for client in ("nats", "aiokafka", "pulsar", "_pulsar"):
        assert client not in modules, f"broker client {client} was imported"


# --- tool plugins ---------------------------------------------------------------------


def test_the_example_tool_plugins_load_with_their_services_and_default_tools() -> None:
    loaded = {plugin.name: plugin for plugin in load_tool_plugins()}

    assert {"joke", "calculator"} <= set(loaded)
    joke, calculator = loaded["joke"], loaded["calculator"]
    assert joke.distribution == "toolbus-joke"
    assert calculator.distribution == "toolbus-calculator"
    assert [s.id for s in joke.services] == ["joke-service"]
    assert [s.id for s in calculator.services] == ["calculator"]
    assert set(joke.snapshot["tool-service"]) == {"joke-service"}
    assert joke.snapshot["tool"]["tell-joke"]["service"] == "joke-service"
    assert calculator.snapshot["tool"]["calculate"]["service"] == "calculator"


class _RaisingPlugin:
    """A plugin whose hook fails when called."""

    @staticmethod
    @hookimpl
    def toolbus_register_tools(register: ToolRegistrar) -> None:
        raise RuntimeError("this plugin is broken")


class _TypePlugin:
    """A plugin that only adds a tool type."""

    @staticmethod
    @hookimpl
    def toolbus_register_tools(register: ToolRegistrar) -> None:
        register.tool_type("carrier-pigeon")


def test_a_broken_tool_plugin_is_logged_and_skipped_while_the_others_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    missing = metadata.EntryPoint("ghost", "toolbus_no_such_plugin_module", PLUGIN_GROUP)
    raising = metadata.EntryPoint("raising", f"{__name__}:_RaisingPlugin", PLUGIN_GROUP)
    typed = metadata.EntryPoint("pigeon", f"{__name__}:_TypePlugin", PLUGIN_GROUP)
    replace_entry_points(monkeypatch, extra={PLUGIN_GROUP: [missing, raising, typed]})

    with caplog.at_level(logging.ERROR, logger="toolbus.plugins"):
        loaded = {plugin.name: plugin for plugin in load_tool_plugins()}

    assert {"joke", "calculator", "pigeon"} <= set(loaded)
    assert "ghost" not in loaded
    assert "raising" not in loaded
    assert loaded["pigeon"].tool_types == ("carrier-pigeon",)
    failures = [r for r in caplog.records if r.name == "toolbus.plugins"]
    logged = "\n".join(r.getMessage() for r in failures)
    assert "'ghost'" in logged
    assert "'raising'" in logged
    assert all(r.exc_info for r in failures), "the cause must be in the log"


# --- listing -------------------------------------------------------------------------


def test_installed_plugins_lists_adapters_tool_plugins_and_commands_with_versions() -> None:
    found = {(p.kind, p.name): p for p in installed_plugins()}

    expected = {("adapter", name): ep for name, ep in installed(ADAPTER_GROUP).items()}
    expected |= {("llm", name): ep for name, ep in installed(LLM_GROUP).items()}
    expected |= {("state", name): ep for name, ep in installed(STATE_GROUP).items()}
    expected |= {("policy", name): ep for name, ep in installed(POLICY_GROUP).items()}
    expected |= {("tools", name): ep for name, ep in installed(PLUGIN_GROUP).items()}
    expected |= {("commands", name): ep for name, ep in installed(COMMAND_GROUP).items()}
    assert set(found) == set(expected)
    assert {"memory", *FIRST_PARTY_ADAPTERS} <= {n for k, n in found if k == "adapter"}
    assert {"joke", "calculator"} <= {n for k, n in found if k == "tools"}
    assert ("policy", "cedar") in found
    for key, ep in expected.items():
        assert ep.dist is not None
        assert found[key].distribution == ep.dist.metadata["Name"]
        assert found[key].version == metadata.version(ep.dist.metadata["Name"])
    assert found[("adapter", "memory")].distribution == "toolbus"
    assert found[("state", "memory")].distribution == "toolbus"
    assert found[("state", "redis")].distribution == "toolbus-redis"
    assert found[("tools", "joke")].distribution == "toolbus-joke"


def test_installed_plugins_does_not_import_them(monkeypatch: pytest.MonkeyPatch) -> None:
    broken = metadata.EntryPoint("ghost", "toolbus_no_such_plugin_module", PLUGIN_GROUP)
    replace_entry_points(monkeypatch, extra={PLUGIN_GROUP: [broken]})

    names = {p.name for p in installed_plugins()}

    assert "ghost" in names


# --- the examples in docs/plugins.md ---------------------------------------------------

DOCS_PLUGINS = Path(__file__).parent.parent.parent / "docs" / "plugins.md"


def documented_module(marker: str, tmp_path: Path) -> str:
    """Write the python block after ``<!-- MARKER: NAME.py -->`` to tmp_path; its module name."""
    page = DOCS_PLUGINS.read_text(encoding="utf-8")
    match = re.search(rf"<!-- {marker}: (\w+)\.py -->\n```python\n(.*?)```", page, re.S)
    assert match, f"docs/plugins.md has no {marker}"
    (tmp_path / f"{match[1]}.py").write_text(match[2], encoding="utf-8")
    return match[1]


@pytest.mark.anyio
async def test_the_documented_tool_plugin_loads_and_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, toolbus: ToolTestKit
) -> None:
    module = documented_module("plugin example", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    replace_entry_points(
        monkeypatch, extra={PLUGIN_GROUP: [metadata.EntryPoint("weather", module, PLUGIN_GROUP)]}
    )

    weather = {plugin.name: plugin for plugin in load_tool_plugins()}["weather"]
    registry = build_registry(Settings(), load_tool_plugins())
    await toolbus.serve(*weather.services)
    answer = await toolbus.tools(registry).call("get-weather", {"city": "Paris"})

    assert [s.id for s in weather.services] == ["weather"]
    assert answer == "Paris: sunny, 24 °C (metric)"
    assert resolve_service("weather").id == "weather"


@pytest.mark.anyio
async def test_the_documented_adapter_is_found_by_its_scheme_and_carries_messages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = documented_module("adapter example", tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    replace_entry_points(
        monkeypatch,
        extra={ADAPTER_GROUP: [metadata.EntryPoint("loopback", module, ADAPTER_GROUP)]},
    )

    assert adapter_for("loopback://docs").distribution == "toolbus-loopback"
    bus = await connect("loopback://docs")
    try:
        subscription = await bus.subscribe("non-persistent://docs/q/loopback")
        await bus.publish("non-persistent://docs/q/loopback", b"hello", {"id": "1"})
        with anyio.fail_after(5):
            async for delivery in subscription:
                assert delivery.body == b"hello"
                break
    finally:
        await bus.close()


def test_a_tool_without_arguments_takes_them_from_its_typed_service() -> None:
    @tool_service("forecast")
    async def forecast(city: Annotated[str, Field(description="The city")], days: int = 1) -> str:
        return city

    registrar = ToolRegistrar()
    registrar.service(
        forecast,
        tools={
            "derived": {"name": "derived", "description": "d"},
            "explicit": {"name": "explicit", "description": "e", "arguments": []},
        },
    )

    assert registrar.tools["derived"]["arguments"] == [
        {"name": "city", "type": "string", "description": "The city"},
        {"name": "days", "type": "integer", "description": "Days", "required": False, "default": 1},
    ]
    assert registrar.tools["explicit"]["arguments"] == []
