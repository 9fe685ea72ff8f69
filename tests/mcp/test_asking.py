"""Tools on the bus that ask their caller, relayed by the MCP door to the SDK's real client.

Over both revisions (``legacy``: 2025-11-25 with a session, the door sending
``elicitation/create``, ``sampling/createMessage`` and ``roots/list`` during
the call; ``auto``: 2026-07-28, the door answering ``input_required`` and the
client calling again), in memory and over HTTP: the client's callbacks answer,
and the tool's answer reflects what they said.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import mcp_types
import pytest
from mcp import Client
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter

from tests.mcp.conformance_tools import SERVICES, snapshot
from tests.mcp.support import ALICE_TOKEN, http_client
from tests.mcp.tasks_client import TASKS, call_raw, task_get, task_update, until_final
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import parse_door_settings
from toolbus.application.doors.steps import call_steps
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.application.sealing import SealKey, SealKeys
from toolbus.domain.config.loading import load_registry
from toolbus.plugins import connect_state
from toolbus.ports import StateStore
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.running import door_tasks
from toolbus_mcp.serving.server import BusMcpServer, McpCaller
from toolbus_mcp.serving.tasks import McpTasks
from toolbus_mcp.serving.transports import serve_http

pytestmark = pytest.mark.anyio

KEYS = SealKeys((SealKey("mcp-asking", b"m" * 32),))
ANY: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


@pytest.fixture
async def server() -> AsyncIterator[BusMcpServer]:
    """Alice's MCP door over the conformance tools, the ones that ask among them."""
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES, seal_keys=KEYS)
        tools = kit.tools(load_registry(snapshot()))
        door = FrontDoor(
            tools,
            policy=AccessPolicy(tools.registry.snapshot, None),
            settings=parse_door_settings(None),
            audit=ListAuditSink(),
            metrics=ToolbusMetrics.disabled(),
        )
        server = BusMcpServer(door, caller=McpCaller("alice"))
        yield server
        await server.close()


class Person:
    """The client's side: its person fills forms, its model completes, its roots are known."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, Any]] = []

    async def elicit(self, context: Any, params: Any) -> mcp_types.ElicitResult:
        self.asked.append(("elicitation", params))
        return mcp_types.ElicitResult(
            action="accept", content={"name": "Alice", "username": "alice", "email": "a@x"}
        )

    async def sample(self, context: Any, params: Any) -> mcp_types.CreateMessageResult:
        self.asked.append(("sampling", params))
        return mcp_types.CreateMessageResult(
            role="assistant",
            content=mcp_types.TextContent(text="Paris"),
            model="client-model",
            stop_reason="endTurn",
        )

    async def roots(self, context: Any) -> mcp_types.ListRootsResult:
        self.asked.append(("roots", None))
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri="file:///home/alice/work")])

    def callbacks(self) -> dict[str, Any]:
        return {
            "elicitation_callback": self.elicit,
            "sampling_callback": self.sample,
            "list_roots_callback": self.roots,
        }


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_client_answers_elicitation_sampling_and_roots(
    server: BusMcpServer, mode: str
) -> None:
    person = Person()
    async with Client(server.server, mode=mode, **person.callbacks()) as client:
        greeted = await client.call_tool("test_input_required_result_elicitation", {})
        capital = await client.call_tool("test_sampling", {"prompt": "Capital of France?"})
        several = await client.call_tool("test_input_required_result_multiple_inputs", {})
        roots = await client.call_tool("test_input_required_result_list_roots", {})

    assert greeted.content[0].text == "Hello, Alice!"
    assert capital.content[0].text == "LLM response: Paris"
    assert several.content[0].text == "got ['client_roots', 'greeting', 'user_name']"
    assert roots.content[0].text == "roots: file:///home/alice/work"
    kinds = [kind for kind, _ in person.asked]
    assert kinds[:2] == ["elicitation", "sampling"]
    assert sorted(kinds[2:5]) == ["elicitation", "roots", "sampling"] and kinds[5:] == ["roots"]
    elicited = person.asked[0][1]
    assert elicited.message == "What is your name?"
    assert elicited.requested_schema["properties"] == {"name": {"type": "string"}}
    assert person.asked[1][1].messages[0].content.text == "Capital of France?"


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_form_reaches_the_client_as_the_tool_wrote_it(
    server: BusMcpServer, mode: str
) -> None:
    person = Person()
    async with Client(server.server, mode=mode, **person.callbacks()) as client:
        result = await client.call_tool("test_elicitation_sep1330_enums", {})

    schema = person.asked[0][1].requested_schema
    assert schema["properties"]["legacyEnum"]["enumNames"] == [
        "Option One",
        "Option Two",
        "Option Three",
    ]
    assert schema["properties"]["titledMulti"]["items"]["anyOf"][0] == {
        "const": "value1",
        "title": "First Choice",
    }
    assert result.content[0].text.startswith("Elicitation completed: action=accept")


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_without_the_capability_is_refused_naming_it(
    server: BusMcpServer, mode: str
) -> None:
    person = Person()
    async with Client(server.server, mode=mode, sampling_callback=person.sample) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("test_input_required_result_elicitation", {})
        # A tool that asks only for what its caller can give still answers.
        answered = await client.call_tool("test_input_required_result_capabilities", {})

    assert refused.value.error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
    assert refused.value.error.data == {"requiredCapabilities": {"elicitation": {}}}
    assert "declare the elicitation capability to use it" in refused.value.error.message
    assert answered.content[0].text == "answered ['summary']"
    assert [kind for kind, _ in person.asked] == ["sampling"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_a_client_that_can_answer_nothing_hears_so_at_once(
    server: BusMcpServer, mode: str
) -> None:
    # The SDK's client with no callbacks declares no elicitation, sampling or roots:
    # over HTTP, the door tells it at once what the tool wanted, and serves it the rest.
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    server.caller = None
    async with anyio.create_task_group() as group:
        port = await group.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, ALICE_TOKEN, mode=mode) as client:
            refused: dict[str, MCPError] = {}
            # A hang here (a question held for a client that cannot answer) fails the
            # test instead of waiting for the client's read timeout.
            with anyio.fail_after(20):
                for tool, arguments in [
                    ("test_elicitation", {"message": "Sure?"}),
                    ("test_sampling", {"prompt": "Hi"}),
                ]:
                    with pytest.raises(MCPError) as raised:
                        await client.call_tool(tool, arguments)
                    refused[tool] = raised.value
                with pytest.raises(MCPError) as roots:
                    await client.call_tool("test_input_required_result_list_roots", {})
                plain = await client.call_tool("test_simple_text", {})
        group.cancel_scope.cancel()

    for tool, kind in [("test_elicitation", "elicitation"), ("test_sampling", "sampling")]:
        error = refused[tool].error
        assert error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert error.data == {"requiredCapabilities": {kind: {}}}
        assert f"declare the {kind} capability to use it" in error.message
    assert roots.value.error.data == {"requiredCapabilities": {"roots": {}}}
    assert plain.content[0].text == "This is a simple text response for testing."


async def test_a_client_that_fails_to_answer_gets_the_tools_error_naming_it(
    server: BusMcpServer,
) -> None:
    # The client declared sampling, but its model is down: it answers the door's
    # sampling/createMessage with an error. The call ends at once with an error result
    # that says so (the round's other questions are given up), and the door goes on.
    person = Person()

    async def model_down(context: Any, params: Any) -> mcp_types.ErrorData:
        return mcp_types.ErrorData(code=mcp_types.INTERNAL_ERROR, message="model is down")

    callbacks = {**person.callbacks(), "sampling_callback": model_down}
    async with Client(server.server, mode="legacy", **callbacks) as client:
        with anyio.fail_after(20):
            failed = await client.call_tool("test_input_required_result_multiple_inputs", {})
            after = await client.call_tool("test_input_required_result_list_roots", {})

    assert failed.is_error
    assert failed.content[0].text == (
        "Error: tool 'test_input_required_result_multiple_inputs' failed (input-unavailable): "
        "the MCP client did not answer the tool's sampling request: model is down"
    )
    assert after.content[0].text == "roots: file:///home/alice/work"


async def test_a_tampered_or_foreign_state_is_a_protocol_error(server: BusMcpServer) -> None:
    person = Person()
    async with Client(server.server, mode="auto", **person.callbacks()) as client:
        first = await client.session.call_tool(
            "test_input_required_result_tampered_state", {}, allow_input_required=True
        )
        assert isinstance(first, mcp_types.InputRequiredResult)
        assert first.request_state is not None and first.request_state.startswith("input.")
        answers = {"confirm": mcp_types.ElicitResult(action="accept", content={"ok": True})}
        with pytest.raises(MCPError) as tampered:
            await client.session.call_tool(
                "test_input_required_result_tampered_state",
                {},
                input_responses=answers,
                request_state=first.request_state + "-TAMPERED",
            )
        # The same state, brought to another tool of another service, does not open either.
        with pytest.raises(MCPError) as elsewhere:
            await client.session.call_tool(
                "test_input_required_result_elicitation",
                {},
                input_responses=answers,
                request_state=first.request_state,
            )
        kept = await client.session.call_tool(
            "test_input_required_result_tampered_state",
            {},
            input_responses=answers,
            request_state=first.request_state,
        )

    assert tampered.value.error.code == mcp_types.INVALID_PARAMS
    assert "does not open" in tampered.value.error.message
    assert elsewhere.value.error.code == mcp_types.INVALID_PARAMS
    assert isinstance(kept, mcp_types.CallToolResult)
    assert kept.content[0].text == "state-ok: confirmed True"


async def limited_door(
    stack: AsyncExitStack, limit: str, tool: str
) -> tuple[BusMcpServer, StateStore]:
    """Alice's MCP door over the conformance tools, ``tool`` limited to one call a minute
    (the limit named ``limit``), counted in a store of its own (returned with it)."""
    kit = await ToolTestKit.open(stack)
    await kit.serve(*SERVICES, seal_keys=KEYS)
    tools = kit.tools(load_registry(snapshot()))
    store = await connect_state(f"memory://mcp-asking-limits-{uuid.uuid4().hex}")
    stack.push_async_callback(store.close)
    settings = {"limits": [{"name": limit, "calls": 1, "every": "1m", "tools": [tool]}]}
    door = FrontDoor(
        tools,
        policy=AccessPolicy(tools.registry.snapshot, None),
        settings=parse_door_settings(None),
        audit=ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps(settings, store=store),
    )
    server = BusMcpServer(door, caller=McpCaller("alice"))
    stack.push_async_callback(server.close)
    return server, store


async def test_a_call_continued_with_answers_counts_once_in_its_limit() -> None:
    """The call made again with the answers and its state is the call that asked: a limit
    counted it when it came. The same state brought once more is a call of its own."""
    tool = "test_input_required_result_elicitation"
    async with AsyncExitStack() as stack:
        server, _ = await limited_door(stack, "asks", tool)
        person = Person()
        async with Client(server.server, mode="auto", **person.callbacks()) as client:
            asked = await client.session.call_tool(tool, {}, allow_input_required=True)
            assert isinstance(asked, mcp_types.InputRequiredResult)
            name = mcp_types.ElicitResult(action="accept", content={"name": "Alice"})

            async def answered() -> Any:
                return await client.session.call_tool(
                    tool,
                    {},
                    input_responses={"user_name": name},
                    request_state=asked.request_state,
                    allow_input_required=True,
                )

            continued = await answered()
            replayed = await answered()
            fresh = await client.session.call_tool(tool, {}, allow_input_required=True)

    assert isinstance(continued, mcp_types.CallToolResult)
    assert not continued.is_error and continued.content[0].text == "Hello, Alice!"
    for refused in (replayed, fresh):
        assert isinstance(refused, mcp_types.CallToolResult) and refused.is_error
        assert "the limit 'asks' allows 1 call every 1m" in refused.content[0].text


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_over_http_too(server: BusMcpServer, mode: str) -> None:
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    server.caller = None  # callers come from the HTTP gate
    person = Person()
    async with anyio.create_task_group() as group:
        port = await group.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, ALICE_TOKEN, mode=mode, **person.callbacks()) as client:
            rounds = await client.call_tool("test_input_required_result_multi_round", {})
            greeted = await client.call_tool("test_elicitation", {"message": "Who are you?"})
        group.cancel_scope.cancel()

    assert rounds.content[0].text == "Alice likes None"
    assert greeted.content[0].text.startswith("User response: action=accept")
    assert [kind for kind, _ in person.asked] == ["elicitation"] * 3


@asynccontextmanager
async def with_tasks(server: BusMcpServer) -> AsyncIterator[None]:
    store = await connect_state(f"memory://mcp-asking-{uuid.uuid4().hex}")
    async with door_tasks(server.door, store, shared=False) as runner:
        McpTasks(server, runner)
        yield
    await store.close()


async def test_a_task_waits_for_each_answer_of_its_tool(server: BusMcpServer) -> None:
    async with with_tasks(server), Client(server.server, **_tasks_client()) as client:
        created = await call_raw(client, "multi_input", {})
        asked = await _until_asked(client, created["taskId"], 2)
        first, second = sorted(asked["inputRequests"])
        yes = {"action": "accept", "content": {"confirm": True}}
        await task_update(client, created["taskId"], {first: yes, "unasked": yes})
        half = await task_get(client, created["taskId"])
        await task_update(client, created["taskId"], {second: yes})
        final = await until_final(client, created["taskId"])

    assert created["resultType"] == "task"
    assert asked["inputRequests"][first]["method"] == "elicitation/create"
    assert half["status"] == "input_required" and list(half["inputRequests"]) == [second]
    assert final["status"] == "completed"
    assert final["result"]["content"][0]["text"] == "both answered: ['first', 'second']"


async def test_asked_in_time_it_answers_in_place_then_becomes_a_task(
    server: BusMcpServer,
) -> None:
    async with with_tasks(server), Client(server.server, **_tasks_client()) as client:
        first = await call_raw(client, "test_tool_with_task", {})
        answer = mcp_types.ElicitResult(action="accept", content={"name": "Alice"})
        again = mcp_types.CallToolRequest(
            params=mcp_types.CallToolRequestParams(
                name="test_tool_with_task",
                arguments={},
                input_responses={"user_name": answer},
                request_state=first["requestState"],
            )
        )
        created = await client.session.send_request(again, ANY)
        final = await until_final(client, created["taskId"])

    assert first["resultType"] == "input_required" and "taskId" not in first
    assert list(first["inputRequests"]) == ["user_name"]
    assert created["resultType"] == "task" and "requestState" not in created
    assert final["result"]["content"][0]["text"] == "Done for Alice"


async def test_asked_in_time_and_answered_in_place_it_counts_once_in_its_limit() -> None:
    """An ``optional`` tool that asks within ``task-after`` hands its question to the
    client, whose call with the answers is the call that asked: a limit of one lets it
    through, and the task the client never saw ends cancelled."""
    tool = "test_tool_with_task"
    async with AsyncExitStack() as stack:
        server, store = await limited_door(stack, "once", tool)
        runner = await stack.enter_async_context(door_tasks(server.door, store, shared=False))
        McpTasks(server, runner)
        async with Client(server.server, **_tasks_client()) as client:
            first = await call_raw(client, tool, {})
            answer = mcp_types.ElicitResult(action="accept", content={"name": "Alice"})
            again = mcp_types.CallToolRequest(
                params=mcp_types.CallToolRequestParams(
                    name=tool,
                    arguments={},
                    input_responses={"user_name": answer},
                    request_state=first["requestState"],
                )
            )
            created = await client.session.send_request(again, ANY)
            final = await until_final(client, created["taskId"])
            listed = await runner.runner.book.of_owner("alice")

    assert first["resultType"] == "input_required"
    assert final["status"] == "completed", final
    assert final["result"]["content"][0]["text"] == "Done for Alice"
    assert sorted(task.status for task in listed) == ["cancelled", "completed"]


def _tasks_client() -> dict[str, Any]:
    """A client of the tasks extension that declares elicitation (answered with tasks/update)."""
    return {"extensions": [advertise(TASKS)], "elicitation_callback": Person().elicit}


async def _until_asked(client: Client, task_id: str, count: int) -> dict[str, Any]:
    with anyio.fail_after(10):
        while True:
            task = await task_get(client, task_id)
            if len(task.get("inputRequests") or {}) >= count:
                return task
            await anyio.sleep(0.05)
