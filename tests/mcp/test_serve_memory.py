"""``toolbus mcp serve`` on memory:// (the default broker) serves the installed plugins'
tools in its own process, as ``toolbus call`` does: nothing else could reach them."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

TOOLBUS = str(Path(sys.executable).with_name("toolbus"))


async def test_a_tool_of_an_installed_plugin_answers_over_stdio(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG")}
    # No broker given and no toolbus.toml in the working directory: memory://.
    parameters = StdioServerParameters(
        command=TOOLBUS, args=["mcp", "serve", "--timeout", "20"], env=env, cwd=tmp_path
    )
    with anyio.fail_after(60):
        async with Client(parameters, read_timeout_seconds=30) as client:
            answer = await client.call_tool("calculate", {"expression": "6 * 7"})

    assert not answer.is_error, answer.content
    assert answer.content[0].text == "42"
