"""The gateway and ``toolbus mcp serve`` as real processes on memory://, in the quick suite.

The door conformance suite (slow) holds every door to the same cases on NATS.
These start each HTTP door from its command line, as a user does, and check it
listens, authenticates and answers, so that a door that no longer starts shows
in every run. On memory:// ``mcp serve`` runs the installed plugins' services
itself: its call goes all the way to the calculator.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from tests.doors.processes import LISTEN, door_process
from tests.mcp.support import http_client
from toolbus.plugins import ToolRegistrar
from toolbus_calculator import plugin as calculator_plugin

pytestmark = pytest.mark.anyio

KEY = "alice-key-0123456789abcdefghij"
#: An MCP initialize request, and what a client of streamable HTTP accepts.
HELLO = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "stranger", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"
SETTINGS = """
[[credentials.api-keys]]
user = "alice"
env = "ALICE_KEY"

[permissions.users]
alice = ["default"]
"""


@pytest.fixture
def door_directory(tmp_path: Path) -> Path:
    """toolbus.toml (alice's key and groups) and config.json (the calculator's tool)."""
    registrar = ToolRegistrar()
    calculator_plugin.toolbus_register_tools(register=registrar)
    config = {"tool-service": registrar.service_descriptors, "tool": registrar.tools}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "toolbus.toml").write_text(SETTINGS)
    return tmp_path


async def test_the_gateway_process_serves_its_tools_to_the_keys_it_knows(
    door_directory: Path,
) -> None:
    args = ["gateway", "--broker", "memory://", "--config", "config.json", *LISTEN]
    environment = {"ALICE_KEY": KEY}
    async with (
        door_process(args, cwd=door_directory, environment=environment, http=True) as door,
        httpx.AsyncClient(base_url=f"http://127.0.0.1:{door.port}", timeout=30) as http,
    ):
        stranger = await http.get("/v1/tools")
        listed = await http.get("/v1/tools", headers={"Authorization": f"Bearer {KEY}"})
        opened = await http.post(
            "/v1/sessions", json={"messages": []}, headers={"Authorization": f"Bearer {KEY}"}
        )

    assert stranger.status_code == 401
    assert listed.status_code == 200, listed.text
    assert [tool["function"]["name"] for tool in listed.json()["tools"]] == ["calculate"]
    assert opened.status_code == 201, opened.text


async def test_the_mcp_process_answers_a_call_with_its_plugins_services(
    door_directory: Path,
) -> None:
    args = ["mcp", "serve", "--transport", "http", "--broker", "memory://", *LISTEN]
    environment = {"ALICE_KEY": KEY}
    async with door_process(args, cwd=door_directory, environment=environment, http=True) as door:
        url = f"http://127.0.0.1:{door.port}/mcp"
        async with http_client(url, KEY) as alice:
            listed = await alice.list_tools()
            answer = await alice.call_tool("calculate", {"expression": "6 * 7"})
        async with httpx.AsyncClient(timeout=30) as http:
            stranger = await http.post(url, json=HELLO, headers={"Accept": ACCEPT})

    # The installed plugins' tools (the joke's too), served by this process.
    assert "calculate" in [tool.name for tool in listed.tools]
    assert not answer.is_error and answer.content[0].text == "42"
    assert stranger.status_code == 401
