"""An imported MCP server that misbehaves cannot flood the bus or the registry.

A real SDK server (tests/mcp/unruly_server.py) over stdio: a burst of
tools-list changes is listed again at a bounded rate, never once per change;
a tool list whose pages never end, or that is too long, is refused with the
bound named; and an agent's registry keeps an announced tool no longer than
its maximum TTL, whatever the announcement says.
"""

from __future__ import annotations

import itertools
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from tests.mcp.test_toolsets import bridged
from toolbus.application.live.announcements import ANNOUNCEMENTS_QUEUE
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.errors import ConfigError
from toolbus.domain.live import announcements as messages
from toolbus.plugins import connect
from toolbus_mcp.importing.addresses import McpServerAddress
from toolbus_mcp.importing.toolsets import McpToolset

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

UNRULY = (sys.executable, "-m", "tests.mcp.unruly_server")
#: Changes announced, and the seconds between them: each one alone, after the last was listed.
CHURN, PAUSE = 100, 0.02
#: The least time between two lists of the tools, which the toolset promises.
RELIST_INTERVAL = 0.5
#: How much earlier than asked an event loop may wake (its clock's resolution, and more).
CLOCK_SLACK = 0.001


async def serve_once(toolset: McpToolset) -> None:
    """Start serving ``toolset``: a server that cannot be served raises at once."""
    bus = await connect(f"memory://unruly-{uuid.uuid4().hex[:8]}")
    try:
        with anyio.fail_after(25):
            await toolset.serve(bus)
    finally:
        await bus.close()


async def test_a_burst_of_list_changes_is_listed_again_at_a_bounded_rate(tmp_path: Path) -> None:
    lists = tmp_path / "lists.txt"
    server = McpServerAddress(command=(*UNRULY, "--lists", str(lists)))
    toolset = McpToolset("unruly", server, relist_interval=RELIST_INTERVAL)
    async with bridged(toolset, "unruly_churn") as (tools, live):
        before = len(lists.read_text().splitlines())
        churned = await tools.call("unruly_churn", {"count": CHURN, "pause": PAUSE})
        assert churned == f"churned {CHURN}"
        last = f"unruly_churned_{CHURN - 1}"
        await live.wait_until(lambda registry: last in registry.tools, timeout=30)
        listed = [float(line) for line in lists.read_text().splitlines()[before:]]

    # Listed again (the last change too), and never sooner than an interval after the
    # list before: a load that stretches the burst makes more lists, never closer ones.
    assert listed
    gaps = [later - earlier for earlier, later in itertools.pairwise(listed)]
    assert all(gap >= RELIST_INTERVAL - CLOCK_SLACK for gap in gaps), gaps


async def test_pages_that_never_end_are_refused_naming_the_bound() -> None:
    toolset = McpToolset("unruly", McpServerAddress(command=(*UNRULY, "--endless")), max_pages=20)
    with pytest.raises(ConfigError) as refused:
        await serve_once(toolset)
    assert "more than 20 pages" in str(refused.value)


async def test_a_tool_list_longer_than_the_bound_is_refused() -> None:
    toolset = McpToolset(
        "unruly", McpServerAddress(command=(*UNRULY, "--tools", "500")), max_tools=100
    )
    with pytest.raises(ConfigError) as refused:
        await serve_once(toolset)
    assert "lists 501 tools; at most 100 are served" in str(refused.value)


async def test_an_announced_ttl_is_kept_within_the_registry_s_bounds() -> None:
    bus = await connect(f"memory://ttl-{uuid.uuid4().hex[:8]}")
    announcement = messages.Announcement(
        service="forever",
        instance="i-1",
        descriptor={
            "request-queue": "non-persistent://t/request/forever",
            "response-queue": "non-persistent://t/response/forever",
        },
        tools={
            "forever-tool": {
                "type": "tool-service",
                "name": "forever-tool",
                "description": "announced once, for ever",
                "service": "forever",
                "arguments": [],
            }
        },
        ttl=1e12,
    )
    try:
        async with LiveRegistry(bus, follow_config=False, max_ttl=0.5) as live:
            await bus.publish(ANNOUNCEMENTS_QUEUE, messages.encode(announcement))
            await live.wait_until(lambda registry: "forever-tool" in registry.tools, timeout=10)
            # Never announced again, and never withdrawn: gone after the registry's bound.
            await live.wait_until(lambda registry: "forever-tool" not in registry.tools, timeout=10)
    finally:
        await bus.close()
    default = messages.decode(messages.encode(announcement))
    assert default.ttl == messages.MAX_TTL
