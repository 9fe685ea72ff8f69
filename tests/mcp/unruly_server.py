"""A misbehaving MCP server, written with the SDK's low-level server, run over stdio by tests.

``python -m tests.mcp.unruly_server [--endless] [--tools N] [--lists FILE]``

* ``--endless``: ``tools/list`` pages never end (each page one tool and a
  cursor to the next).
* ``--tools N``: one page of N tools.
* ``--lists FILE``: a line is appended to FILE for every ``tools/list`` served:
  when it came (``time.monotonic()``, one clock for every process of the machine).
* The tool ``churn`` (arguments ``count``, ``pause``) adds ``count`` tools one
  by one, announcing a tools-list change after each, ``pause`` seconds apart.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mcp
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

OPEN = {"type": "object", "properties": {}}


def build(endless: bool, tools: int, lists: Path | None) -> Server[Any]:
    added: list[str] = []
    events = InMemorySubscriptionBus()

    async def list_tools(
        ctx: ServerRequestContext[Any, Any], params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListToolsResult:
        if lists is not None:
            with lists.open("a") as log:
                log.write(f"{time.monotonic()}\n")
        if endless:
            page = int(params.cursor) if params is not None and params.cursor else 0
            tool = mcp.Tool(name=f"page_{page}", input_schema=OPEN)
            return mcp.ListToolsResult(tools=[tool], next_cursor=str(page + 1))
        names = ["churn", *added, *(f"many_{n}" for n in range(tools))]
        churn_schema = {
            "type": "object",
            "properties": {"count": {"type": "integer"}, "pause": {"type": "number"}},
            "required": ["count"],
        }
        return mcp.ListToolsResult(
            tools=[
                mcp.Tool(name=name, input_schema=churn_schema if name == "churn" else OPEN)
                for name in names
            ]
        )

    async def call_tool(
        ctx: ServerRequestContext[Any, Any], params: mcp.CallToolRequestParams
    ) -> mcp.CallToolResult:
        count = int((params.arguments or {}).get("count", 0))
        pause = float((params.arguments or {}).get("pause", 0))
        for n in range(count):
            await anyio.sleep(pause)
            added.append(f"churned_{n}")
            await events.publish(ToolsListChanged())
            with contextlib.suppress(Exception):  # a 2026-07-28 client listens instead
                await ctx.session.send_tool_list_changed()
        return mcp.CallToolResult(content=[mcp.TextContent(text=f"churned {count}")])

    server: Server[Any] = Server(
        "unruly",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_subscriptions_listen=ListenHandler(events),
    )
    return server


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endless", action="store_true")
    parser.add_argument("--tools", type=int, default=0)
    parser.add_argument("--lists", type=Path, default=None)
    options = parser.parse_args()
    server = build(options.endless, options.tools, options.lists)
    initialization = server.create_initialization_options(NotificationOptions(tools_changed=True))
    async with stdio_server() as (read, write):
        await server.run(read, write, initialization)


if __name__ == "__main__":
    anyio.run(main)
