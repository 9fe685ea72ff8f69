"""Bus tools as an MCP server: the SDK's real client against BusMcpServer.

In-process (the SDK's own in-memory transport) for the session semantics, and
over real streamable HTTP (uvicorn on 127.0.0.1) for tokens, groups and the gate.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from importlib import metadata
from typing import Any

import anyio
import httpx2
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from tests.mcp.support import (
    ALICE_TOKEN,
    BOB_TOKEN,
    PERMISSIONS,
    front_door,
    http_client,
    names,
    next_change,
)
from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import tool_service
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.application.identity.keys import public_jwk
from toolbus.application.live.announcements import announcing, service_tools
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.config.loading import load_registry
from toolbus.plugins import connect
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.server import WORKFLOW_META_KEY, BusMcpServer, McpCaller
from toolbus_mcp.serving.transports import ListenError, serve_http

pytestmark = pytest.mark.anyio

RESEARCHER = McpCaller("carol", ("read-only", "knowledge", "compute"))


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


def bridge(
    kit: ToolTestKit,
    audit: ListAuditSink,
    *,
    caller: McpCaller | None = RESEARCHER,
    permissions=None,
    doors: dict[str, Any] | None = None,
    clock: Any = None,
) -> BusMcpServer:
    registry = load_registry(workflow_snapshot(permissions=permissions))
    door = front_door(kit.tools(registry), audit=audit, doors=doors, clock=clock)
    return BusMcpServer(door, caller=caller)


async def test_the_tool_list_is_what_an_agent_session_offers(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink())
    async with Client(server.server) as client:
        listed = await client.list_tools()
    session = server.door.open(RESEARCHER.user, RESEARCHER.groups)
    assert names(listed) == sorted(tool["name"] for tool in session.tools("mcp"))
    assert names(listed) == ["knowledge-query", "text-completion"]
    query = next(tool for tool in listed.tools if tool.name == "knowledge-query")
    assert query.input_schema["properties"]["question"]["type"] == "string"
    assert query.input_schema["required"] == ["question"]


async def test_a_call_goes_over_the_bus_moves_the_state_and_notifies(kit: ToolTestKit) -> None:
    audit = ListAuditSink()
    server = bridge(kit, audit)
    async with Client(server.server) as client:
        before = names(await client.list_tools())
        async with client.listen(tools_list_changed=True) as changes:
            result = await client.call_tool("knowledge-query", {"question": "who?"})
            await next_change(changes)
        after = names(await client.list_tools())
    assert not result.is_error
    assert result.content[0].text.startswith("[carol] Company X")
    assert "graph-update" not in before and "complex-analysis" not in before
    assert "complex-analysis" in after and "knowledge-query" not in after
    await server.close()
    [record] = audit.records
    assert [(t.tool, t.from_state, t.to_state) for t in record.state_transitions] == [
        ("knowledge-query", "undefined", "analysis")
    ]


async def test_a_tool_error_is_an_error_result_and_keeps_the_state(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink())
    async with Client(server.server) as client:
        await client.call_tool("knowledge-query", {"question": "who?"})
        failed = await client.call_tool("complex-analysis", {"dataset": "broken"})
        refused = await client.call_tool("reset-workflow", {})
        still = names(await client.list_tools())
    assert failed.is_error and "corrupt" in failed.content[0].text
    assert refused.is_error and "No call was made" in refused.content[0].text
    assert "complex-analysis" in still


async def test_a_2025_revision_client_gets_list_changed_notifications(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink())
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with Client(server.server, mode="legacy", message_handler=on_message) as client:
        assert client.server_capabilities.tools is not None
        assert client.server_capabilities.tools.list_changed
        await client.list_tools()
        await client.call_tool("knowledge-query", {"question": "who?"})
        with anyio.fail_after(10):
            await changed.wait()
        assert "complex-analysis" in names(await client.list_tools())


@pytest.mark.parametrize(
    "mode",
    # The legacy handshake's initialize answer, and the server/discover answer (and
    # every other) of 2026-07-28, which carry it in _meta.
    ["legacy", "auto"],
)
async def test_the_server_says_which_toolbus_it_is(kit: ToolTestKit, mode: Any) -> None:
    server = bridge(kit, ListAuditSink())

    async with Client(server.server, mode=mode) as client:
        if mode == "auto":
            assert client.protocol_version == "2026-07-28"
        assert client.server_info is not None
        assert client.server_info.name == "toolbus"
        assert client.server_info.version == metadata.version("toolbus-mcp")


async def test_each_workflow_named_in_meta_has_its_own_state(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink())
    mine, yours = {WORKFLOW_META_KEY: "mine"}, {WORKFLOW_META_KEY: "yours"}
    async with Client(server.server) as client:
        await client.call_tool("knowledge-query", {"question": "who?"}, meta=mine)
        moved = names(await client.list_tools(meta=mine))
        untouched = names(await client.list_tools(meta=yours))
    assert "complex-analysis" in moved
    assert untouched == ["knowledge-query", "text-completion"]


async def test_a_long_lived_workflow_writes_a_record_every_so_many_calls(
    kit: ToolTestKit,
) -> None:
    audit = ListAuditSink()
    server = bridge(kit, audit, doors={"calls-per-record": 2})
    async with Client(server.server) as client:
        await client.call_tool("text-completion", {"prompt": "one"})
        await client.call_tool("knowledge-query", {"question": "two"})
        after = await client.call_tool("complex-analysis", {"dataset": "three"})
    assert not after.is_error  # the state moved in the first record carried over
    [first] = audit.records
    assert [call.tool for call in first.calls] == ["text-completion", "knowledge-query"]
    await server.close()
    assert [call.tool for call in audit.records[1].calls] == ["complex-analysis"]
    assert audit.records[1].initial_state == "analysis"
    assert audit.records[1].request_id == first.request_id  # one workflow, several records


async def test_a_refused_call_is_audited_at_once(kit: ToolTestKit) -> None:
    audit = ListAuditSink()
    server = bridge(kit, audit)
    async with Client(server.server) as client:
        await client.call_tool("knowledge-query", {"question": "who?"})
        await client.call_tool("reset-workflow", {})
        assert [[c.refusal for c in r.calls] for r in audit.records] == [[None, "group"]]
        await client.call_tool("complex-analysis", {"dataset": "d"})
    await server.close()
    assert [c.tool for c in audit.records[1].calls] == ["complex-analysis"]


async def test_an_idle_workflow_is_closed_and_its_record_written(kit: ToolTestKit) -> None:
    audit = ListAuditSink()
    now = [0.0]
    server = bridge(kit, audit, doors={"session-idle-timeout": 60}, clock=lambda: now[0])
    async with Client(server.server) as client:
        await client.call_tool("knowledge-query", {"question": "who?"})
        now[0] = 30.0
        assert await server.close_idle() == 0
        now[0] = 120.0
        assert await server.close_idle() == 1
        fresh = names(await client.list_tools())
    [record] = audit.records
    assert record.final_state == "analysis"
    assert fresh == ["knowledge-query", "text-completion"]  # a new workflow starts over


async def test_signed_live_permissions_that_revoke_the_groups_refuse_clearly(
    kit: ToolTestKit,
) -> None:
    from toolbus.application.identity import generate_key
    from toolbus.application.identity.documents import (
        PERMISSIONS_PURPOSE,
        DocumentVerifier,
        sign_document,
    )

    operator = generate_key("Ed25519", kid="operator-1")
    allowed = {"users": {"carol": list(RESEARCHER.groups or ())}, "fallback": []}
    tools = kit.tools(load_registry(workflow_snapshot(permissions=allowed)))
    policy = AccessPolicy(
        tools.registry.snapshot, None, live_keys=DocumentVerifier([public_jwk(operator)])
    )
    server = BusMcpServer(front_door(tools, policy=policy), caller=RESEARCHER)
    async with Client(server.server) as client:
        assert names(await client.list_tools())
        revoked = {"users": {"carol": ["read-only"]}, "fallback": []}
        signed = sign_document(revoked, operator, purpose=PERMISSIONS_PURPOSE)
        tools.registry = load_registry(workflow_snapshot(permissions={"signed": signed}))
        with pytest.raises(MCPError) as refused:
            await client.list_tools()
    assert "may not use group(s)" in str(refused.value)


async def test_unsigned_live_permissions_change_nothing(kit: ToolTestKit) -> None:
    allowed = {"users": {"carol": ["read-only"]}, "fallback": []}
    tools = kit.tools(load_registry(workflow_snapshot(permissions=allowed)))
    server = BusMcpServer(front_door(tools), caller=McpCaller("carol", ("read-only",)))
    async with Client(server.server) as client:
        before = names(await client.list_tools())
        # What any publisher could put on the bus: everyone gets everything.
        tools.registry = load_registry(workflow_snapshot(permissions={"fallback": ["*"]}))
        escalated = BusMcpServer(server.door, caller=McpCaller("mallory", ("*",)))
        async with Client(escalated.server) as mallory:
            with pytest.raises(MCPError) as refused:
                await mallory.list_tools()
        after = names(await client.list_tools())
    assert before == after
    assert "mallory" in str(refused.value)


async def test_workflows_are_limited_per_user_and_none_is_evicted(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink(), doors={"max-workflows-per-user": 3})
    other = BusMcpServer(server.door, caller=McpCaller("dave", RESEARCHER.groups))
    async with Client(server.server) as client, Client(other.server) as dave:
        await client.list_tools()  # the default workflow: one of the three
        await client.call_tool("knowledge-query", {"question": "?"}, meta={WORKFLOW_META_KEY: "a"})
        await client.list_tools(meta={WORKFLOW_META_KEY: "b"})
        with pytest.raises(MCPError) as refused:
            await client.list_tools(meta={WORKFLOW_META_KEY: "c"})
        # The same name from another user is another workflow, and fits.
        assert names(await dave.list_tools(meta={WORKFLOW_META_KEY: "a"}))
        kept = names(await client.list_tools(meta={WORKFLOW_META_KEY: "a"}))
    assert "too many workflows" in str(refused.value)
    assert "complex-analysis" in kept  # "a" kept its state


async def test_an_announced_service_appearing_notifies_clients(kit: ToolTestKit) -> None:
    @tool_service("weather")
    async def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    async with AsyncExitStack() as stack:
        live = LiveRegistry(kit.bus, follow_config=False)
        await stack.enter_async_context(live)
        door = front_door(live.tools(kit.client))
        server = BusMcpServer(door, live=live, caller=McpCaller("dave"))
        tasks = await stack.enter_async_context(anyio.create_task_group())
        await tasks.start(server.follow_changes)
        async with Client(server.server) as client:
            assert names(await client.list_tools()) == []
            async with (
                client.listen(tools_list_changed=True) as changes,
                running(kit.bus, weather),
                announcing(kit.bus, weather),
            ):
                await next_change(changes)
                assert names(await client.list_tools()) == ["weather"]
                answer = await client.call_tool("weather", {"city": "Oslo"})
        assert answer.content[0].text == "sunny in Oslo"
        tasks.cancel_scope.cancel()


async def test_a_2025_revision_client_hears_of_a_service_appearing(kit: ToolTestKit) -> None:
    @tool_service("clock")
    async def clock() -> str:
        """The time."""
        return "noon"

    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    async with AsyncExitStack() as stack:
        live = LiveRegistry(kit.bus, follow_config=False)
        await stack.enter_async_context(live)
        door = front_door(live.tools(kit.client))
        server = BusMcpServer(door, live=live, caller=McpCaller("dave"))
        tasks = await stack.enter_async_context(anyio.create_task_group())
        await tasks.start(server.follow_changes)
        async with (
            Client(server.server, mode="legacy", message_handler=on_message) as client,
        ):
            assert names(await client.list_tools()) == []
            async with running(kit.bus, clock), announcing(kit.bus, clock):
                with anyio.fail_after(10):
                    await changed.wait()
                assert names(await client.list_tools()) == ["clock"]
        tasks.cancel_scope.cancel()


# ------------------------------------------------------------------ HTTP: tokens and groups


@pytest.fixture
async def http_url(kit: ToolTestKit) -> AsyncIterator[tuple[str, ListAuditSink]]:
    audit = ListAuditSink()
    server = bridge(kit, audit, caller=None, permissions=PERMISSIONS)
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN), ApiKey.of("bob", BOB_TOKEN)])
    async with anyio.create_task_group() as tasks:
        port = await tasks.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        yield f"http://127.0.0.1:{port}/mcp", audit
        tasks.cancel_scope.cancel()


async def test_two_tokens_two_users_two_tool_lists(
    http_url: tuple[str, ListAuditSink],
) -> None:
    url, _ = http_url
    groups = {"Toolbus-Groups": "read-only,knowledge"}
    async with http_client(url, ALICE_TOKEN, groups) as alice:
        alices = names(await alice.list_tools())
        answer = await alice.call_tool("knowledge-query", {"question": "who?"})
    async with http_client(url, BOB_TOKEN, {"Toolbus-Groups": "compute, text"}) as bob:
        bobs = names(await bob.list_tools())
    assert alices == ["knowledge-query", "text-completion"]
    assert bobs == ["text-completion"]
    assert answer.content[0].text.startswith("[alice] ")


async def test_a_state_change_over_http_notifies_the_client(
    http_url: tuple[str, ListAuditSink],
) -> None:
    url, _ = http_url
    async with http_client(url, ALICE_TOKEN, {"Toolbus-Groups": "read-only,knowledge"}) as alice:
        await alice.list_tools()
        async with alice.listen(tools_list_changed=True) as changes:
            await alice.call_tool("knowledge-query", {"question": "who?"})
            await next_change(changes)
        assert names(await alice.list_tools()) == ["graph-update", "text-completion"]


async def test_2025_revision_http_sessions_are_workflows_and_hear_of_changes(
    http_url: tuple[str, ListAuditSink],
) -> None:
    url, _ = http_url
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            changed.set()

    groups = {"Toolbus-Groups": "read-only,knowledge"}
    async with httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {ALICE_TOKEN}", **groups}, timeout=30
    ) as http:
        first = Client(
            streamable_http_client(url, http_client=http), mode="legacy", message_handler=on_message
        )
        second = Client(streamable_http_client(url, http_client=http), mode="legacy")
        async with first, second:
            await first.list_tools()
            await first.call_tool("knowledge-query", {"question": "who?"})
            with anyio.fail_after(10):
                await changed.wait()
            moved = names(await first.list_tools())
            untouched = names(await second.list_tools())
    assert moved == ["graph-update", "text-completion"]
    assert untouched == ["knowledge-query", "text-completion"]


@pytest.mark.parametrize(
    "headers",
    [{}, {"Authorization": "Bearer not-a-known-token-at-all"}, {"Authorization": "Basic abc"}],
    ids=["no token", "unknown token", "not bearer"],
)
async def test_no_or_unknown_token_is_401(
    http_url: tuple[str, ListAuditSink], headers: dict[str, str]
) -> None:
    url, _ = http_url
    async with httpx2.AsyncClient() as http:
        response = await http.post(url, json={}, headers=headers)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"] == "unauthenticated"
    assert response.json()["reason"] in {"missing", "unknown-key"}
    assert "not-a-known-token" not in response.text


@pytest.mark.parametrize("order", ["alice first", "bob first"])
async def test_two_authorization_headers_are_400_whichever_comes_first(
    http_url: tuple[str, ListAuditSink], order: str
) -> None:
    url, audit = http_url
    alice = order == "alice first"
    tokens = [ALICE_TOKEN, BOB_TOKEN] if alice else [BOB_TOKEN, ALICE_TOKEN]
    groups = "read-only,knowledge" if alice else "compute,text"  # the first one's
    hello = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        },
    }
    accept = [("Accept", "application/json, text/event-stream"), ("Toolbus-Groups", groups)]
    async with httpx2.AsyncClient(timeout=30) as http:
        both = [("Authorization", f"Bearer {token}") for token in tokens]
        refused = await http.post(url, json=hello, headers=[*both, *accept])
        elsewhere = await http.get(url.replace("/mcp", "/other"), headers=both)
        one = await http.post(url, json=hello, headers=[both[0], *accept])

    for answer in (refused, elsewhere):
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"] == "several-credentials"
        assert "more than one Authorization header" in answer.json()["message"]
    assert one.status_code == 200, one.text  # the same request with one credential is served
    assert not audit.records


async def test_a_forged_group_is_403_and_audited(http_url: tuple[str, ListAuditSink]) -> None:
    url, audit = http_url
    async with httpx2.AsyncClient() as http:
        response = await http.post(
            url,
            json={},
            headers={"Authorization": f"Bearer {BOB_TOKEN}", "Toolbus-Groups": "text,admin"},
        )
    assert response.status_code == 403
    assert response.json()["error"] == "access-denied"
    assert "'admin'" in response.json()["message"]
    [record] = audit.records
    assert record.user == "bob" and record.outcome == "denied"
    assert record.access_denied is not None and record.access_denied.denied_groups == ["admin"]
    assert BOB_TOKEN not in repr(record)


async def test_a_session_belongs_to_the_credential_that_opened_it(
    http_url: tuple[str, ListAuditSink],
) -> None:
    url, _ = http_url
    # No groups: what either user may ask for, so that only the session is in question.
    headers = {"Toolbus-Groups": "", "Accept": "application/json, text/event-stream"}
    opened: list[str] = []

    async def remember(response: httpx2.Response) -> None:
        if "mcp-session-id" in response.headers:
            opened.append(response.headers["mcp-session-id"])

    async with (
        httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {BOB_TOKEN}", **headers},
            timeout=30,
            event_hooks={"response": [remember]},
        ) as http,
        Client(streamable_http_client(url, http_client=http), mode="legacy") as bob,
    ):
        await bob.list_tools()
        ping = {"jsonrpc": "2.0", "id": 9, "method": "ping"}
        session = {"Mcp-Session-Id": opened[0], "Mcp-Protocol-Version": "2025-06-18"}
        async with httpx2.AsyncClient(headers=headers, timeout=30) as other:
            alice = await other.post(
                url, json=ping, headers={"Authorization": f"Bearer {ALICE_TOKEN}", **session}
            )
            owner = await other.post(
                url, json=ping, headers={"Authorization": f"Bearer {BOB_TOKEN}", **session}
            )

    assert alice.status_code == 404  # as if bob's session did not exist
    assert owner.status_code == 200


async def test_an_address_in_use_is_a_clear_error(kit: ToolTestKit) -> None:
    server = bridge(kit, ListAuditSink(), caller=None)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ListenError) as error:
            await serve_http(server, CredentialTable(), port=port)
    assert f"127.0.0.1:{port}" in str(error.value) and "--listen" in str(error.value)


async def test_calls_are_signed_with_the_client_s_user_and_groups() -> None:
    from tests.identity.support import key_pair, whoami
    from toolbus.application.identity import CallVerifier

    keys = key_pair()
    who = whoami()
    snapshot = {
        "tool-service": {who.service.id: who.service.descriptor()},
        "tool": {"whoami": {**service_tools(who.service)[who.service.id], "group": ["team"]}},
    }
    verifier = CallVerifier([keys.public])
    async with AsyncExitStack() as stack:
        bus = await connect(f"memory://mcp-signed-{id(keys)}")
        stack.push_async_callback(bus.close)
        await stack.enter_async_context(running(bus, who.service, verifier=verifier))
        client = await stack.enter_async_context(
            ToolServiceClient(bus, signer=keys.signer(), default_timeout=10)
        )
        tools = Tools(client, load_registry(snapshot))
        server = BusMcpServer(front_door(tools), caller=McpCaller("erin", ("team",)))
        async with Client(server.server) as mcp_client:
            answer = await mcp_client.call_tool(who.service.id, {})
    assert answer.content[0].text == "erin team verified=True"


async def test_the_input_schema_checked_on_http_follows_a_reconfiguration(
    kit: ToolTestKit,
) -> None:
    server = bridge(kit, ListAuditSink())
    schema_of = server.server.get_tool_input_schema
    assert schema_of is not None
    async with Client(server.server) as client:
        listed = {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}
    assert schema_of("knowledge-query") == listed["knowledge-query"]
    assert schema_of("no-such-tool") is None

    snapshot = workflow_snapshot()
    snapshot["tool"]["knowledge-query"]["arguments"].append(
        {"name": "depth", "type": "integer", "description": "how deep"}
    )
    server.tools.registry = load_registry(snapshot)

    schema = schema_of("knowledge-query")
    assert schema is not None
    assert set(schema["properties"]) == {"question", "depth"}
