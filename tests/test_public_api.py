"""What a user catches and loads comes from ``toolbus`` itself, not a sub-package."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import toolbus
from toolbus import (
    BusClosed,
    MessageTooLarge,
    PluginError,
    Registry,
    ToolbusError,
    UnknownTool,
    open_tools,
    registry_from,
)

pytestmark = pytest.mark.anyio

WORKFLOW = Path(__file__).parent / "data" / "workflow.json"


def test_every_public_name_is_importable() -> None:
    for name in toolbus.__all__:
        assert getattr(toolbus, name) is not None, name


async def test_an_unknown_tool_is_caught_as_toolbus_unknown_tool() -> None:
    async with open_tools("memory://public-api", WORKFLOW) as tools:
        with pytest.raises(UnknownTool):
            await tools.call("no-such-tool")


async def test_a_missing_adapter_is_caught_as_toolbus_plugin_error() -> None:
    with pytest.raises(PluginError, match="no-such-broker"):
        await toolbus.connect("no-such-broker://x")


async def test_a_closed_bus_and_a_large_message_are_caught_from_toolbus() -> None:
    bus = await toolbus.connect("memory://public-api-limits?max_message_size=8")
    with pytest.raises(MessageTooLarge):
        await bus.publish("queue", b"more than eight bytes")
    await bus.close()
    with pytest.raises(BusClosed):
        await bus.publish("queue", b"x")
    assert issubclass(BusClosed, ToolbusError) and issubclass(MessageTooLarge, ToolbusError)


def test_registry_from_accepts_a_path_a_snapshot_and_a_registry() -> None:
    from_path = registry_from(WORKFLOW)
    from_snapshot = registry_from(json.loads(WORKFLOW.read_text()))

    assert isinstance(from_path, Registry)
    assert list(from_snapshot.tools) == list(from_path.tools)
    assert registry_from(from_path) is from_path
