"""MCP servers as tool services: real SDK servers as subprocesses, over stdio and HTTP.

The bridge serves a toolset on an in-memory bus; an agent side follows the
announcements with a LiveRegistry and calls the tools by their bus names,
exactly as it would call any announced service.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tests.mcp.support import MEMORY_SERVER, REPOSITORY
from tests.support.servers import server_on_free_port
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.tools import Tools
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, ToolCallError
from toolbus.plugins import connect
from toolbus_mcp.importing.addresses import McpServerAddress
from toolbus_mcp.importing.toolsets import McpToolset, ToolsetUnavailable

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

GET_MEMORIES = "memory_server_get_memories"


def stdio_server(*arguments: str, env: dict[str, str] | None = None) -> McpServerAddress:
    return McpServerAddress(command=(*MEMORY_SERVER, *arguments), env=env or {})


@asynccontextmanager
async def bridged(
    toolset: McpToolset, first: str = GET_MEMORIES
) -> AsyncIterator[tuple[Tools, LiveRegistry]]:
    """``toolset`` served on a fresh in-memory bus, and an agent's live view of that bus
    once it offers the tool ``first``."""
    async with AsyncExitStack() as stack:
        bus = await connect(f"memory://mcp-{id(toolset)}")
        stack.push_async_callback(bus.close)
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)
        await tasks.start(lambda task_status: toolset.serve(bus, task_status=task_status))
        client = await stack.enter_async_context(ToolServiceClient(bus, default_timeout=30))
        live = await stack.enter_async_context(LiveRegistry(bus, follow_config=False))
        await live.wait_until(lambda registry: first in registry.tools, timeout=30)
        yield live.tools(client), live


async def offered(live: LiveRegistry, check: Callable[[Registry], bool]) -> Registry:
    return await live.wait_until(check, timeout=30)


async def test_a_stdio_server_s_tools_are_announced_and_called_over_the_bus() -> None:
    toolset = McpToolset("memory_server", stdio_server(), call_timeout=2)
    async with bridged(toolset) as (tools, live):
        tool = live.registry.tool(GET_MEMORIES)
        answer = await tools.call(GET_MEMORIES, {"topic": "tea"}, user="ann")
        picture = await tools.call("memory_server_picture", {}, user="ann")
        with pytest.raises(ToolCallError) as failed:
            await tools.call("memory_server_fail", {}, user="ann")
        with pytest.raises(ToolCallError) as hung:
            await tools.call("memory_server_hang", {}, user="ann")
    assert tool.description == "What the user told us before, about a topic."
    assert [(a.name, a.type, a.required) for a in tool.arguments] == [("topic", "string", False)]
    assert answer == "The user likes tea (memories about tea)."
    assert '"type": "image"' in picture and '"mimeType": "image/gif"' in picture
    assert failed.value.error_type == "tool-service-error"
    assert "the memory store is locked" in failed.value.message
    assert hung.value.error_type == "deadline-exceeded"
    assert "'hang'" in hung.value.message and "memory_server" in hung.value.message


async def test_a_server_that_dies_fails_calls_clearly_and_is_restarted() -> None:
    toolset = McpToolset("memory_server", stdio_server(), restart_delay=0.1)
    async with bridged(toolset) as (tools, _):
        with pytest.raises(ToolCallError) as crashed:
            await tools.call("memory_server_crash", {}, user="ann")
        with pytest.raises(ToolCallError) as meanwhile:
            await tools.call(GET_MEMORIES, {}, user="ann")
        with anyio.fail_after(30):
            await toolset.wait_connected()
        answer = await tools.call(GET_MEMORIES, {}, user="ann")
    assert crashed.value.error_type == "unavailable"
    assert "'memory_server'" in crashed.value.message
    assert meanwhile.value.error_type == "unavailable"
    assert "'memory_server'" in meanwhile.value.message
    assert toolset.connections == 2
    assert answer.startswith("The user likes tea")


async def test_a_tools_list_change_is_announced() -> None:
    toolset = McpToolset("memory_server", stdio_server())
    async with bridged(toolset) as (tools, live):
        await tools.call("memory_server_remember", {"fact": "lemons"}, user="ann")
        registry = await offered(live, lambda r: "memory_server_recall_lemons" in r.tools)
        recalled = await tools.call("memory_server_recall_lemons", {}, user="ann")
    assert GET_MEMORIES in registry.tools
    assert recalled == "lemons"


async def test_replicas_of_a_toolset_compete_for_calls(tmp_path: Path) -> None:
    logs = [tmp_path / "first.txt", tmp_path / "second.txt"]
    first, second = (McpToolset("memory_server", stdio_server("--calls", str(log))) for log in logs)
    async with AsyncExitStack() as stack:
        bus = await connect("memory://mcp-replicas")
        stack.push_async_callback(bus.close)
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)
        for replica in (first, second):
            # Two calls at a time each: a burst has to be shared.
            await tasks.start(
                lambda task_status, replica=replica: replica.serve(
                    bus, concurrency=2, task_status=task_status
                )
            )
        client = await stack.enter_async_context(ToolServiceClient(bus, default_timeout=30))
        live = await stack.enter_async_context(LiveRegistry(bus, follow_config=False))
        await live.wait_until(lambda registry: GET_MEMORIES in registry.tools, timeout=30)
        tools = live.tools(client)
        async with anyio.create_task_group() as calls:
            for index in range(20):
                calls.start_soon(lambda i=index: tools.call(GET_MEMORIES, {"topic": f"t{i}"}))
    served = [len(log.read_text().splitlines()) for log in logs]
    assert sum(served) == 20 and min(served) > 0, served


async def test_a_streamable_http_server_is_bridged_with_headers_from_the_environment(
    tmp_path: Path,
) -> None:
    def argv(port: int) -> list[str]:
        return [*MEMORY_SERVER, "--http", str(port)]

    environment = {"PYTHONPATH": str(REPOSITORY)}
    with server_on_free_port(argv, workdir=tmp_path, env=environment) as (port, _):
        address = McpServerAddress.parse(
            url=f"http://127.0.0.1:{port}/mcp",
            headers=["X-Api-Key=MEMORY_API_KEY"],
            environ={"MEMORY_API_KEY": "k-0123456789"},
        )
        async with bridged(McpToolset("memory_server", address)) as (tools, _):
            answer = await tools.call(GET_MEMORIES, {"topic": "http"}, user="ann")
    assert answer == "The user likes tea (memories about http)."
    assert "k-0123456789" not in repr(address)


async def test_secrets_reach_the_server_from_named_variables_only() -> None:
    address = McpServerAddress.parse(
        command=" ".join(MEMORY_SERVER),
        env=["MEMORY_TOKEN=BRIDGE_SECRET"],
        environ={"BRIDGE_SECRET": "s3cret-value"},
    )
    async with bridged(McpToolset("memory_server", address)) as (tools, live):
        answer = await tools.call("memory_server_secret_env", {}, user="ann")
        announced = repr(live.registry.snapshot)
    assert answer == "token set"
    assert "s3cret-value" not in announced and "s3cret-value" not in repr(address)


def test_a_missing_secret_variable_is_named() -> None:
    with pytest.raises(ConfigError) as error:
        McpServerAddress.parse(command="x", env=["TOKEN=NOT_SET_ANYWHERE"], environ={})
    assert "'NOT_SET_ANYWHERE'" in str(error.value)


async def test_tool_names_that_clash_after_sanitizing_are_refused_naming_both() -> None:
    toolset = McpToolset("memory_server", stdio_server("--clash"))
    bus = await connect("memory://mcp-clash")
    try:
        with pytest.raises(ConfigError) as error:
            await toolset.serve(bus)
    finally:
        await bus.close()
    message = str(error.value)
    assert "'get_memories'" in message and "'get.memories'" in message
    assert GET_MEMORIES in message


async def test_a_command_that_is_no_mcp_server_fails_at_start(tmp_path: Path) -> None:
    garbage = (sys.executable, "-c", "import sys; print('hello, I am not JSON'); sys.stdin.read()")
    toolset = McpToolset(
        "garbage", McpServerAddress(command=garbage), connect_timeout=3, call_timeout=3
    )
    bus = await connect("memory://mcp-garbage")
    try:
        with pytest.raises(ToolsetUnavailable) as error:
            await toolset.serve(bus)
    finally:
        await bus.close()
    assert "'garbage'" in str(error.value)


async def test_a_server_s_questions_go_to_the_bus_caller_that_can_answer() -> None:
    from toolbus import ElicitationAnswer, InputUnavailable, SamplingAnswer
    from toolbus.application.calls.relaying import relaying
    from toolbus.domain.calls.input_requests import Elicitation, InputAsk

    asked: list[str] = []

    class Caller:
        kinds = frozenset({"elicitation", "sampling"})

        async def answer(self, ask: InputAsk) -> dict[str, object]:
            answers: dict[str, object] = {}
            for key, request in ask.requests.items():
                if isinstance(request, Elicitation):
                    asked.append(request.message)
                    answers[key] = ElicitationAnswer("accept", {"sure": True})  # no note
                else:
                    asked.append("sampling")
                    answers[key] = SamplingAnswer("farewell", "caller-model")
            return answers  # type: ignore[return-value]

    address = McpServerAddress(command=(sys.executable, "-m", "tests.mcp.asking_server"))
    toolset = McpToolset("files", address, call_timeout=20)
    async with bridged(toolset, "files_delete_file") as (tools, _):
        with relaying(Caller()):
            answer = await tools.call("files_delete_file", {"path": "a.txt"}, user="ann")
        with pytest.raises(InputUnavailable) as cannot:
            await tools.call("files_delete_file", {"path": "b.txt"}, user="ann")

    # The form's default fills what the caller left out (SEP-1034).
    assert answer == "a.txt deleted (no note); farewell"
    assert asked == ["Delete a.txt?", "sampling"]
    assert cannot.value.kinds == {"elicitation", "sampling"}  # the server asks both at once
