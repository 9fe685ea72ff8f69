"""Approvals asked of an MCP client's person: elicitation during the call (2025
revisions), or an input request the client answers by calling again (2026-07-28)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import mcp_types
import pytest
from mcp import Client

from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import parse_door_settings
from toolbus.application.doors.steps import call_steps
from toolbus.domain.config.loading import load_registry
from toolbus.plugins import connect_state
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.server import BusMcpServer, McpCaller

pytestmark = pytest.mark.anyio

RESEARCHER = McpCaller("carol", ("read-only", "knowledge", "compute"))


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


async def bridge(kit: ToolTestKit, audit: ListAuditSink) -> BusMcpServer:
    """Calls of knowledge-query need approval; callers approve their own."""
    tools = kit.tools(load_registry(workflow_snapshot()))
    door = FrontDoor(
        tools,
        policy=AccessPolicy(tools.registry.snapshot, None),
        settings=parse_door_settings(None),
        audit=audit,
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps(
            {
                "approvals": {
                    "approvers": ["ops"],
                    "callers-approve": True,
                    "tools": ["knowledge-query"],
                }
            },
            store=await connect_state("memory://mcp-approvals"),
        ),
    )
    return BusMcpServer(door, caller=RESEARCHER)


def answering(approve: bool | None, asked: list[Any]) -> Any:
    """The client's person: approves, denies (declines the form), or is never asked."""

    async def elicit(context: Any, params: Any) -> mcp_types.ElicitResult:
        asked.append(params)
        if approve is None:
            raise AssertionError("the person was asked")
        if not approve:
            return mcp_types.ElicitResult(action="decline")
        return mcp_types.ElicitResult(action="accept", content={"approve": True, "note": "ok"})

    return elicit


@pytest.mark.parametrize("mode", ["legacy", "auto"])
@pytest.mark.parametrize("approve", [True, False])
async def test_the_client_s_person_approves_or_denies_the_call(
    kit: ToolTestKit, mode: str, approve: bool
) -> None:
    audit = ListAuditSink()
    server = await bridge(kit, audit)
    asked: list[Any] = []
    async with Client(
        server.server, mode=mode, elicitation_callback=answering(approve, asked)
    ) as client:
        result = await client.call_tool("knowledge-query", {"question": "who?"})
    await server.close()

    assert len(asked) == 1
    assert "knowledge-query" in str(asked[0])
    if approve:
        assert not result.is_error, result
        assert result.content[0].text.startswith("[carol]")
    else:
        assert result.is_error and "denied" in result.content[0].text
    # a refused call is recorded at once, and the workflow's record again when it closes
    notes = {
        (call.approval.status, call.approval.decided_by)
        for record in audit.records
        for call in record.calls
        if call.approval is not None
    }
    assert notes == {("approved" if approve else "denied", "carol")}
