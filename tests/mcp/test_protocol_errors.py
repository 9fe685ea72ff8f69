"""What the MCP server answers to calls and requests that do not follow the protocol.

The SDK's real client (in memory and over streamable HTTP) and raw HTTP
against uvicorn on 127.0.0.1: arguments that do not fit a tool's input schema
are the protocol's invalid-params error and nothing runs; a request whose id
JSON-RPC does not allow, a body too large and a body that is not JSON are each
answered with a JSON-RPC error object, never with silence or plain text.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from tests.mcp.support import ALICE_TOKEN, PERMISSIONS, http_client
from tests.mcp.test_serve import RESEARCHER, bridge, kit  # noqa: F401  (kit: a fixture)
from tests.session.support import SERVICES
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.arguments import _Schema
from toolbus_mcp.serving.transports import serve_http

pytestmark = pytest.mark.anyio

GROUPS = {"Toolbus-Groups": "read-only,knowledge"}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture
async def mcp_url(kit: ToolTestKit) -> AsyncIterator[str]:  # noqa: F811
    server = bridge(kit, ListAuditSink(), caller=None, permissions=PERMISSIONS)
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    async with anyio.create_task_group() as tasks:
        port = await tasks.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        yield f"http://127.0.0.1:{port}/mcp"
        tasks.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [({"question": 42}, "42 is not of type 'string'"), ({}, "'question' is a required property")],
    ids=["wrong-type", "missing"],
)
async def test_arguments_that_do_not_fit_the_input_schema_are_invalid_params(
    kit: ToolTestKit,  # noqa: F811
    mcp_url: str,
    arguments: dict[str, Any],
    problem: str,
) -> None:
    audit = ListAuditSink()
    server = bridge(kit, audit)
    refusals = []
    async with Client(server.server) as client:
        with pytest.raises(MCPError) as in_memory:
            await client.call_tool("knowledge-query", arguments)
        refusals.append(in_memory.value)
        fine = await client.call_tool("knowledge-query", {"question": "who?"})
    async with http_client(mcp_url, ALICE_TOKEN, GROUPS) as client:
        with pytest.raises(MCPError) as over_http:
            await client.call_tool("knowledge-query", arguments)
        refusals.append(over_http.value)

    for refused in refusals:
        assert refused.code == mcp_types.INVALID_PARAMS
        assert "knowledge-query" in str(refused) and problem in str(refused)
    assert not fine.is_error
    await server.close()
    [record] = audit.records
    assert [call.tool for call in record.calls] == ["knowledge-query"]  # only the valid one ran


@pytest.mark.parametrize(
    ("pattern", "compiled"), [("^a{0,3}$", True), ("^a{,3}$", False)], ids=["fast", "fallback"]
)
def test_a_pattern_is_checked_whichever_validator_compiles_it(pattern: str, compiled: bool) -> None:
    # "a{,3}" is Python's regular expression syntax, which jsonschema-rs does not compile:
    # jsonschema checks that schema alone, with the same verdicts and wording.
    schema = _Schema(
        {"type": "object", "properties": {"code": {"type": "string", "pattern": pattern}}}
    )
    assert (schema._fast is not None) is compiled
    assert schema.error({"code": "aaa"}) is None
    assert schema.error({"code": "aaaa"}) == f"code: 'aaaa' does not match '{pattern}'"
    assert schema.error({"code": 7}) == "code: 7 is not of type 'string'"


async def test_a_tool_not_offered_is_refused_without_telling_what_it_takes() -> None:
    audit = ListAuditSink()
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        hosts = {host.service.id: host for host in await kit.serve(*SERVICES)}
        server = bridge(kit, audit)
        async with Client(server.server) as client:
            # Configured, and in carol's groups, but offered in a later state only.
            refused = await client.call_tool("graph-update", {"entity": 42})
        await server.close()

    text = refused.content[0].text
    assert refused.is_error
    assert text.startswith("The tool 'graph-update' cannot be used in the current state")
    assert "No call was made" in text and "entity" not in text
    # Refused for that reason before anything ran: audited so, and the service saw nothing.
    [call] = [call for record in audit.records for call in record.calls]
    assert (call.tool, call.status, call.refusal) == ("graph-update", "refused", "state")
    assert hosts["graph-service"].served().requests == 0


async def legacy_session(http: httpx.AsyncClient, url: str) -> dict[str, str]:
    """Headers of an initialized 2025-06-18 session, over raw HTTP."""
    headers = {"Authorization": f"Bearer {ALICE_TOKEN}", "Accept": ACCEPT, **GROUPS}
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
    answer = await http.post(url, json=hello, headers=headers)
    assert answer.status_code == 200, answer.text
    headers["Mcp-Session-Id"] = answer.headers["mcp-session-id"]
    headers["MCP-Protocol-Version"] = "2025-06-18"
    done = await http.post(
        url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=headers
    )
    assert done.status_code == 202
    return headers


def json_rpc_error(answer: httpx.Response, code: int) -> str:
    assert answer.headers["content-type"].startswith("application/json"), answer.text
    error = json.loads(answer.text)
    assert error["jsonrpc"] == "2.0" and error["id"] is None, error
    assert error["error"]["code"] == code, error
    return str(error["error"]["message"])


@pytest.mark.parametrize("request_id", ['{"a": 1}', "[1]", "1.5", "true", "null"])
async def test_a_request_id_json_rpc_does_not_allow_is_an_invalid_request(
    mcp_url: str, request_id: str
) -> None:
    body = f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/list", "params": {{}}}}'
    async with httpx.AsyncClient(timeout=30) as http:
        headers = await legacy_session(http, mcp_url)
        answer = await http.post(
            mcp_url, content=body, headers={**headers, "Content-Type": "application/json"}
        )
    assert answer.status_code == 400
    assert "string or an integer" in json_rpc_error(answer, mcp_types.INVALID_REQUEST)


@pytest.mark.parametrize("version", ["2025-06-18", "2026-07-28"])
async def test_bodies_too_large_not_json_or_with_nan_get_json_rpc_errors(
    mcp_url: str, version: str
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        headers = await legacy_session(http, mcp_url)
        headers["MCP-Protocol-Version"] = version
        json_headers = {**headers, "Content-Type": "application/json"}
        huge = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "'
        huge += b"a" * (5 * 1024 * 1024) + b'"}}'
        too_large = await http.post(mcp_url, content=huge, headers=json_headers)
        as_text = await http.post(
            mcp_url,
            content='{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}',
            headers={**headers, "Content-Type": "text/plain"},
        )
        nan = await http.post(
            mcp_url,
            content='{"jsonrpc": "2.0", "id": NaN, "method": "tools/list"}',
            headers=json_headers,
        )

    assert too_large.status_code == 413
    assert "larger than" in json_rpc_error(too_large, mcp_types.INVALID_REQUEST)
    assert as_text.status_code == 415
    assert "application/json" in json_rpc_error(as_text, mcp_types.INVALID_REQUEST)
    assert nan.status_code == 400
    json_rpc_error(nan, mcp_types.PARSE_ERROR)


@pytest.mark.parametrize(
    ("json_response", "media_type"),
    [(False, "text/event-stream"), (True, "application/json")],
    ids=["event-stream", "json-response"],
)
async def test_json_response_answers_calls_with_one_json_body(
    kit: ToolTestKit,  # noqa: F811
    json_response: bool,
    media_type: str,
) -> None:
    server = bridge(kit, ListAuditSink(), caller=None, permissions=PERMISSIONS)
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "knowledge-query", "arguments": {"question": "who?"}},
    }
    async with anyio.create_task_group() as tasks:
        port = await tasks.start(
            lambda task_status: serve_http(
                server, table, port=0, json_response=json_response, task_status=task_status
            )
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx.AsyncClient(timeout=30) as http:
            answer = await http.post(url, json=call, headers=await legacy_session(http, url))
        async with http_client(url, ALICE_TOKEN, GROUPS) as client:  # 2026-07-28
            modern = await client.call_tool("knowledge-query", {"question": "who?"})
        tasks.cancel_scope.cancel()
    await server.close()
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith(media_type)
    assert '"isError":false' in answer.text
    assert not modern.is_error
