"""An MCP server's tool list, read page by page within limits: :func:`all_tools`.

A server beyond ``max_pages`` pages or ``max_tools`` tools is refused (a
:class:`~toolbus.ConfigError` naming the toolset), so that one server cannot
flood the bus or the registry.
"""

from __future__ import annotations

import mcp_types as mcp
from mcp import Client

from toolbus.domain.errors import ConfigError, Problem


async def all_tools(client: Client, toolset: str, max_pages: int, max_tools: int) -> list[mcp.Tool]:
    """Every tool the server behind ``client`` lists, within ``max_pages`` and ``max_tools``."""
    tools: list[mcp.Tool] = []
    cursor: str | None = None
    for _ in range(max_pages):
        page = await client.list_tools(cursor=cursor, cache_mode="bypass")
        tools.extend(page.tools)
        if len(tools) > max_tools:
            raise _too_many(
                toolset,
                f"lists {len(tools)} tools{' or more' if page.next_cursor else ''}; at most "
                f"{max_tools} are served (max_tools)",
            )
        cursor = page.next_cursor
        if not cursor:
            return tools
    raise _too_many(
        toolset,
        f"lists its tools in more than {max_pages} pages; at most that many are read (max_pages)",
    )


def _too_many(toolset: str, what: str) -> ConfigError:
    return ConfigError([Problem(f"MCP toolset {toolset!r}", "", f"its server {what}")])
