"""A call a rate limit refuses, over MCP: a tool error result saying when to try again, in its
text (for the model) and its ``_meta`` (for the client), through the SDK's own client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from mcp import Client

from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.steps import call_steps
from toolbus.domain.config.loading import load_registry
from toolbus.plugins import connect_state
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.server import (
    LIMIT_META_KEY,
    RETRY_AFTER_META_KEY,
    BusMcpServer,
    McpCaller,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


async def test_a_limited_call_is_an_error_result_with_the_time_to_wait(kit: ToolTestKit) -> None:
    tools = kit.tools(load_registry(workflow_snapshot()))
    settings = {
        "limits": [{"name": "poems", "calls": 1, "every": "1m", "tools": ["text-completion"]}]
    }
    door = FrontDoor(
        tools,
        policy=AccessPolicy(tools.registry.snapshot, None),
        audit=ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps(settings, store=await connect_state("memory://mcp-limits")),
    )
    server = BusMcpServer(door, caller=McpCaller("carol", ("read-only", "knowledge")))
    async with Client(server.server) as client:
        first = await client.call_tool("text-completion", {"prompt": "a poem"})
        second = await client.call_tool("text-completion", {"prompt": "a poem"})
    await server.close()

    assert not first.is_error and RETRY_AFTER_META_KEY not in (first.meta or {})
    assert second.is_error
    assert "the limit 'poems' allows 1 call every 1m" in second.content[0].text
    assert second.meta is not None and second.meta[LIMIT_META_KEY] == "poems"
    assert 1 <= second.meta[RETRY_AFTER_META_KEY] <= 120
