"""One trace, unbroken, from an MCP client to an imported MCP server, across the bus.

MCP client ──▶ ``toolbus mcp serve`` ──▶ agent session ──▶ bus ──▶ tool service
(``toolbus serve mcp``'s toolset) ──▶ MCP server. Both MCP servers run in this
process on real HTTP (uvicorn on 127.0.0.1), so that every span, the MCP SDK's
and toolbus's, reaches the one in-memory exporter; the trace context crosses
each MCP hop in the request's ``_meta`` and the bus hop in message properties.
The tree is printed in docs/tool-call-context.md; this test checks that the
page shows what really happens.
"""

from __future__ import annotations

import itertools
import re
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
import uvicorn
from mcp.server import MCPServer
from mcp.server.mcpserver import Context

from tests.mcp.memory_server import build
from tests.mcp.support import front_door, http_client
from tests.support.doc_examples import DOCS
from tests.support.servers import LOOPBACK
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.application.live.registry import LiveRegistry
from toolbus.application.tracing import propagation as tracing
from toolbus.plugins import connect
from toolbus_mcp.importing.toolsets import McpServerAddress, McpToolset
from toolbus_mcp.serving.server import BusMcpServer
from toolbus_mcp.serving.transports import serve_http

pytestmark = pytest.mark.anyio

TOKEN = "ann-token-0123456789abcdef"
SECRET = "s3cret-header-value-0123456789"
PAGE = DOCS / "tool-call-context.md"
#: Attributes whose values change from run to run: shown as "…".
VARYING = {"jsonrpc.request.id", "mcp.session.id"}


@asynccontextmanager
async def asgi_served(app: Any) -> AsyncIterator[str]:
    """``app`` under uvicorn on a free loopback port; yields its base URL."""
    listener = socket.create_server((LOOPBACK, 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(lambda: server.serve(sockets=[listener]))
        try:
            yield f"http://{LOOPBACK}:{listener.getsockname()[1]}"
        finally:
            server.should_exit = True


def tree(spans: list[Any]) -> str:
    """The trace as an indented text tree: name, kind, attributes; ids left out."""
    children: dict[int | None, list[Any]] = {}
    for span in sorted(spans, key=lambda s: s.start_time):
        parent = span.parent.span_id if span.parent is not None else None
        children.setdefault(parent, []).append(span)
    lines: list[str] = []

    def show(span: Any, depth: int) -> None:
        lines.append(f"{'  ' * depth}{span.name}  [{span.kind.name}]")
        for key, value in sorted(span.attributes.items()):
            shown = "…" if key in VARYING else value
            lines.append(f"{'  ' * depth}    {key} = {shown}")
        for child in children.get(span.context.span_id, []):
            show(child, depth + 1)

    for root in children.get(None, []):
        show(root, 0)
    return "\n".join(lines) + "\n"


def documented_tree() -> str:
    found = re.search(r"<!-- trace: mcp-to-mcp -->\n```text\n(.*?)```", PAGE.read_text(), re.S)
    assert found, f"{PAGE.name} has no trace block marked <!-- trace: mcp-to-mcp -->"
    return found[1]


@asynccontextmanager
async def bridged_both_ways(imported_app: Any, tool: str) -> AsyncIterator[Any]:
    """``imported_app`` imported as toolset ``memory_server`` on a bus, served by a
    ``BusMcpServer`` over HTTP; yields an MCP client of that server."""
    bus = await connect(f"memory://trace-{uuid.uuid4().hex}")
    try:
        async with (
            asgi_served(imported_app) as imported,
            anyio.create_task_group() as tasks,
        ):
            address = McpServerAddress.parse(
                url=f"{imported}/mcp", headers=["X-Token=MEMORY_SERVER_TOKEN"]
            )
            toolset = McpToolset("memory_server", address)
            await tasks.start(lambda task_status: toolset.serve(bus, task_status=task_status))
            async with (
                ToolServiceClient(bus, default_timeout=30) as client,
                LiveRegistry(bus, follow_config=False) as live,
            ):
                await live.wait_until(lambda r: tool in r.tools, timeout=30)
                server = BusMcpServer(front_door(live.tools(client)), live=live)
                credentials = CredentialTable([ApiKey.of("ann", TOKEN)])
                port = await tasks.start(
                    lambda task_status: serve_http(
                        server, credentials, port=0, task_status=task_status
                    )
                )
                async with http_client(f"http://{LOOPBACK}:{port}/mcp", TOKEN) as mcp_client:
                    yield mcp_client
                await server.close()
            tasks.cancel_scope.cancel()
    finally:
        await bus.close()


def traceparent_reporter() -> Any:
    """An MCP server whose one tool answers with the ``traceparent`` its request's ``_meta`` had."""
    server = MCPServer("memory_server")

    @server.tool()
    def traceparent(ctx: Context) -> str:
        """The traceparent this call came with."""
        meta = ctx.request_context.meta or {}
        return str(meta.get("traceparent", "none"))

    return server.streamable_http_app()


async def test_without_an_sdk_both_mcp_hops_still_carry_the_trace_in_meta(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert not tracing.recording()
    monkeypatch.setenv("MEMORY_SERVER_TOKEN", SECRET)
    sent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    async with bridged_both_ways(traceparent_reporter(), "memory_server_traceparent") as client:
        answer = await client.call_tool("memory_server_traceparent", {}, meta={"traceparent": sent})

    received = answer.content[0].text
    assert received.split("-")[1] == sent.split("-")[1]  # the client's trace, continued
    assert received.split("-")[2] != sent.split("-")[2]  # by the tool service's own span


async def test_one_trace_runs_from_an_mcp_client_through_the_bus_to_an_imported_server(
    spans: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mcp.shared._otel
    from opentelemetry import trace

    # The MCP SDK keeps the tracer of the first provider its process had; this test's now.
    monkeypatch.setattr(
        mcp.shared._otel, "_tracer", trace.get_tracer_provider().get_tracer("mcp-python-sdk")
    )
    monkeypatch.setenv("MEMORY_SERVER_TOKEN", SECRET)
    imported = build(None, clash=False).streamable_http_app()
    async with bridged_both_ways(imported, "memory_server_get_memories") as client:
        answer = await client.call_tool("memory_server_get_memories", {"topic": "tea"})

    assert answer.content[0].text == "The user likes tea (memories about tea)."
    finished = spans.get_finished_spans()
    [root] = [s for s in finished if s.name == "MCP send tools/call memory_server_get_memories"]
    trace_spans = [s for s in finished if s.context.trace_id == root.context.trace_id]
    by_name = {s.name: s for s in trace_spans}
    chain = [
        "MCP send tools/call memory_server_get_memories",
        "tools/call memory_server_get_memories",
        "execute_tool memory_server_get_memories",
        "toolbus call memory_server",
        "toolbus serve memory_server",
        "MCP send tools/call get_memories",
        "tools/call get_memories",
    ]
    for parent, child in itertools.pairwise(chain):
        assert by_name[child].parent.span_id == by_name[parent].context.span_id, child
    assert by_name[chain[-1]].attributes["mcp.method.name"] == "tools/call"
    assert by_name[chain[-1]].attributes["gen_ai.tool.name"] == "get_memories"
    # Secrets and arguments never reach a span.
    text = repr([dict(s.attributes) for s in spans.get_finished_spans()])
    assert SECRET not in text
    assert "tea" not in text
    assert tree(trace_spans) == documented_tree()
