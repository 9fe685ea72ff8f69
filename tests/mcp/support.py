"""What the MCP bridge tests share: the workflow configuration, clients, processes."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.session.support import workflow_snapshot
from toolbus.application.agent.audit import AuditSink, ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import InProcessHolder
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import parse_door_settings

#: Users, their tokens and their permissions in the HTTP tests.
ALICE_TOKEN = "alice-token-0123456789abcdef"
BOB_TOKEN = "bob-token-0123456789abcdef"
PERMISSIONS = {
    "users": {"alice": ["read-only", "knowledge"], "bob": ["compute", "text"]},
    "fallback": [],
}

MEMORY_SERVER = [sys.executable, "-m", "tests.mcp.memory_server"]
REPOSITORY = Path(__file__).resolve().parents[2]


def front_door(
    tools: Tools,
    *,
    audit: AuditSink | None = None,
    doors: dict[str, Any] | None = None,
    clock: Any = None,
    policy: AccessPolicy | None = None,
) -> FrontDoor:
    """A front door over ``tools``: permissions from their snapshot, ``doors`` as [doors]."""
    options: dict[str, Any] = {} if clock is None else {"holder": InProcessHolder(clock)}
    return FrontDoor(
        tools,
        policy=policy or AccessPolicy(tools.registry.snapshot, None),
        settings=parse_door_settings(doors),
        audit=audit if audit is not None else ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        **options,
    )


def snapshot_with_permissions() -> dict[str, Any]:
    return workflow_snapshot(permissions=PERMISSIONS)


def write_credentials(directory: Path) -> None:
    """``toolbus.toml`` in ``directory`` with API keys from a variable and from a file."""
    (directory / "bob.key").write_text(BOB_TOKEN + "\n")
    (directory / "toolbus.toml").write_text(
        '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_MCP_TOKEN"\n\n'
        '[[credentials.api-keys]]\nuser = "bob"\nfile = "bob.key"\n'
    )


def names(result: Any) -> list[str]:
    return sorted(tool.name for tool in result.tools)


@asynccontextmanager
async def http_client(
    url: str, token: str | None, headers: dict[str, str] | None = None, **options: Any
) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP, sending ``token`` as a bearer token
    (``options``: the client's, e.g. ``extensions``)."""
    sent = dict(headers or {})
    if token is not None:
        sent["Authorization"] = f"Bearer {token}"
    async with httpx2.AsyncClient(headers=sent, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, read_timeout_seconds=30, **options) as client:
            yield client


async def next_change(subscription: Any, seconds: float = 10.0) -> Any:
    """The next event of a ``subscriptions/listen`` stream."""
    with anyio.fail_after(seconds):
        async for event in subscription:
            return event
    raise AssertionError("the listen stream ended without an event")
