"""Both directions as real processes on a real NATS server.

* ``toolbus serve mcp`` bridges the SDK memory server; an agent session whose
  DIAL-style hook names ``memory_server``/``get_memories`` injects its answer,
  and a second request within the hook's TTL does not call it again.
* ``toolbus mcp serve`` serves the bus's tools to the SDK's client over stdio
  and over streamable HTTP: over stdio too, a slow call becomes a task the
  client polls, and stream chunks come as progress notifications.
"""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.doors.processes import LISTEN, door_process
from tests.live.test_processes import started
from tests.mcp import conformance_tools
from tests.mcp.support import (
    ALICE_TOKEN,
    BOB_TOKEN,
    MEMORY_SERVER,
    http_client,
    names,
    next_change,
    snapshot_with_permissions,
    write_credentials,
)
from tests.mcp.tasks_client import TasksExtension
from tests.session.support import SERVICES
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.live.registry import LiveRegistry
from toolbus.hooks import parse_hooks
from toolbus.plugins import connect
from toolbus.ports import Bus

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

TOOLBUS = [str(Path(sys.executable).with_name("toolbus"))]
MEMORY_HOOK = {
    "kind": "tool_call",
    "event": "on_request_start",
    "toolset_name": "memory_server",
    "tool_name": "get_memories",
    "refresh_condition": {"kind": "ttl", "ttl_minutes": 60},
}


@pytest.fixture
async def nats_bus(live_nats: str) -> AsyncIterator[Bus]:
    bus = await connect(live_nats)
    try:
        yield bus
    finally:
        await bus.close()


async def test_a_hook_reaches_a_bridged_mcp_tool_and_respects_its_ttl(
    live_nats: str, nats_bus: Bus, tmp_path: Path
) -> None:
    calls = tmp_path / "calls.txt"
    server = " ".join([*MEMORY_SERVER, "--calls", str(calls)])
    bridge = [*TOOLBUS, "serve", "mcp", "--toolset", "memory_server", "--command", server]
    bridge += ["--broker", live_nats, "--announce-interval", "600"]  # gone only if withdrawn
    audit = ListAuditSink()
    async with (
        started(bridge, "announcing memory_server") as process,
        ToolServiceClient(nats_bus, default_timeout=30) as client,
        LiveRegistry(nats_bus, follow_config=False) as live,
    ):
        await live.wait_until(lambda r: "memory_server_get_memories" in r.tools, timeout=30)
        tools = live.tools(client)
        history: list[dict[str, Any]] = [{"role": "user", "content": "What do I like?"}]
        async with AgentSession(
            tools, user="ann", hooks=parse_hooks([MEMORY_HOOK]), audit=audit
        ) as first:
            history = await first.start(history)
        async with AgentSession(
            tools, user="ann", hooks=parse_hooks([MEMORY_HOOK]), audit=audit
        ) as second:
            again = await second.start([*history, {"role": "user", "content": "And now?"}])
        process.terminate()  # a graceful stop withdraws the toolset's tools at once
        await live.wait_until(lambda r: "memory_server_get_memories" not in r.tools, timeout=30)
        assert await process.wait() == 0

    [assistant, tool] = history[1:3]
    assert assistant["tool_calls"][0]["function"]["name"] == "memory_server_get_memories"
    assert "_ttl_" in assistant["tool_calls"][0]["id"]
    assert tool["content"] == "The user likes tea (memories about everything)."
    assert calls.read_text().splitlines() == ["everything"]  # the second request did not call
    assert again[:3] == history[:3]
    assert [c.tool for c in audit.records[0].calls] == ["memory_server_get_memories"]
    assert audit.records[1].calls == []


@pytest.fixture
async def workflow_on_nats(nats_bus: Bus, tmp_path: Path) -> AsyncIterator[Path]:
    """The workflow's services on NATS, and its configuration (with permissions) in a file."""
    import json

    config = tmp_path / "snapshot.json"
    config.write_text(json.dumps(snapshot_with_permissions()))
    async with running(nats_bus, *SERVICES):
        yield config


async def test_the_sdk_client_over_stdio_gets_its_session_s_tools(
    live_nats: str, workflow_on_nats: Path
) -> None:
    argv = ["serve", "--transport", "stdio", "--config", str(workflow_on_nats)]
    argv += ["--broker", live_nats, "--user", "alice", "--group", "read-only"]
    argv += ["--group", "knowledge"]
    parameters = StdioServerParameters(
        command=TOOLBUS[0], args=["mcp", *argv], env=dict(os.environ)
    )
    async with Client(parameters, read_timeout_seconds=60) as client:
        before = names(await client.list_tools())
        async with client.listen(tools_list_changed=True) as changes:
            answer = await client.call_tool("knowledge-query", {"question": "who?"})
            await next_change(changes)
        after = names(await client.list_tools())
    assert before == ["knowledge-query", "text-completion"]
    assert answer.content[0].text.startswith("[alice] Company X")
    assert after == ["graph-update", "text-completion"]


async def test_the_sdk_client_over_http_authenticates_with_a_token(
    live_nats: str, workflow_on_nats: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["mcp", "serve", "--transport", "http", *LISTEN]
    args += ["--config", str(workflow_on_nats), "--broker", live_nats]
    write_credentials(tmp_path)
    monkeypatch.setenv("ALICE_MCP_TOKEN", ALICE_TOKEN)
    async with door_process(args, cwd=tmp_path, environment={}, http=True) as door:
        url = f"http://127.0.0.1:{door.port}/mcp"
        async with http_client(url, ALICE_TOKEN, {"Toolbus-Groups": "read-only"}) as alice:
            http = (BOB_TOKEN, {"Toolbus-Groups": "text"})
            async with http_client(url, *http) as bob:
                bobs = names(await bob.list_tools())
            listed = names(await alice.list_tools())
            answer = await alice.call_tool("text-completion", {"prompt": "a bus"})
    assert listed == ["knowledge-query", "text-completion"]
    assert bobs == ["text-completion"]
    assert answer.content[0].text == "[alice] Once upon a time, a bus"


async def test_a_denied_stdio_caller_is_refused_before_serving(
    live_nats: str, workflow_on_nats: Path
) -> None:
    argv = [*TOOLBUS, "mcp", "serve", "--config", str(workflow_on_nats), "--broker", live_nats]
    argv += ["--user", "bob", "--group", "admin"]
    with anyio.fail_after(60):
        result = await anyio.run_process(argv, check=False, stdin=None)
    assert result.returncode == 1
    assert b"may not use group(s) 'admin'" in result.stderr


async def test_tasks_and_progress_over_stdio(live_nats: str, nats_bus: Bus, tmp_path: Path) -> None:
    import json

    config = tmp_path / "tools.json"
    config.write_text(json.dumps(conformance_tools.snapshot()))
    argv = ["mcp", "serve", "--config", str(config), "--broker", live_nats, "--user", "ann"]
    parameters = StdioServerParameters(command=TOOLBUS[0], args=argv, env=dict(os.environ))
    extension = TasksExtension()
    progress: list[str | None] = []

    async def seen(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async with (
        running(nats_bus, *conformance_tools.SERVICES),
        Client(parameters, read_timeout_seconds=60, extensions=[extension]) as client,
    ):
        computed = await client.call_tool("slow_compute", {"seconds": 1, "label": "sums"})
        streamed = await client.call_tool("test_tool_with_progress", {}, progress_callback=seen)
    assert computed.content[0].text == "computed sums in 1s"
    assert len(extension.created) == 1  # it became a task, polled to its end
    assert progress == ["0/100 ", "50/100 ", "100/100 "]
    assert streamed.content[0].text == "0/100 50/100 100/100 "


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_tools_that_ask_are_answered_by_the_client_over_stdio(
    live_nats: str, nats_bus: Bus, tmp_path: Path, mode: str
) -> None:
    import json

    import mcp_types

    config = tmp_path / "tools.json"
    config.write_text(json.dumps(conformance_tools.snapshot()))
    argv = ["mcp", "serve", "--config", str(config), "--broker", live_nats, "--user", "ann"]
    parameters = StdioServerParameters(command=TOOLBUS[0], args=argv, env=dict(os.environ))
    asked: list[str] = []

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params.message)
        return mcp_types.ElicitResult(action="accept", content={"name": "Ann"})

    async def sample(context: Any, params: Any) -> mcp_types.CreateMessageResult:
        asked.append(params.messages[0].content.text)
        text = mcp_types.TextContent(text="Paris")
        return mcp_types.CreateMessageResult(role="assistant", content=text, model="m")

    async with (
        running(nats_bus, *conformance_tools.SERVICES),
        Client(
            parameters,
            mode=mode,
            read_timeout_seconds=60,
            elicitation_callback=elicit,
            sampling_callback=sample,
        ) as client,
    ):
        rounds = await client.call_tool("test_input_required_result_multi_round", {})
        capital = await client.call_tool("test_sampling", {"prompt": "Capital of France?"})

    assert rounds.content[0].text == "Ann likes None"
    assert capital.content[0].text == "LLM response: Paris"
    assert asked == [
        "Step 1: What is your name?",
        "Step 2: What is your favorite color?",
        "Capital of France?",
    ]
