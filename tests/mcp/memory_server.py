"""A real MCP server, written with the SDK, that the tests run as a subprocess.

``python -m tests.mcp.memory_server [--http PORT] [--calls FILE] [--clash]``

Tools: ``get_memories`` (what the agent remembers; each call is appended to
``--calls`` so tests can count them), ``remember`` (adds a tool, announcing the
change), ``crash`` (the process exits at once), ``hang`` (never answers),
``fail`` (an error result), ``picture`` (non-text content), ``secret_env``
(whether ``MEMORY_TOKEN`` reached the server). ``--clash`` adds
``get.memories``, which sanitizes to the same bus name as ``get_memories``.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import anyio
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ImageContent


def build(calls: Path | None, clash: bool) -> MCPServer:
    server = MCPServer("memory_server")

    @server.tool()
    def get_memories(topic: str = "everything") -> str:
        """What the user told us before, about a topic."""
        if calls is not None:
            with calls.open("a") as log:
                log.write(f"{topic}\n")
        return f"The user likes tea (memories about {topic})."

    @server.tool()
    async def remember(fact: str, ctx: Context) -> str:
        """Remember a fact: adds a tool named after it and says the tool list changed."""

        def recall() -> str:
            return fact

        server.add_tool(recall, name=f"recall_{fact}", description=f"Recall {fact}.")
        await ctx.notify_tools_changed()
        return f"remembered {fact}"

    @server.tool()
    def crash() -> str:
        """Exit the server process at once."""
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answer."""
        await anyio.sleep_forever()
        return "unreachable"

    @server.tool()
    def fail() -> str:
        """Always fail."""
        raise ToolError("the memory store is locked")

    @server.tool()
    def picture() -> ImageContent:
        """A one-pixel picture."""
        return ImageContent(type="image", data="R0lGODlhAQABAAAAACw=", mime_type="image/gif")

    @server.tool()
    def secret_env() -> str:
        """Whether MEMORY_TOKEN reached this server (never its value)."""
        return "token set" if os.environ.get("MEMORY_TOKEN") else "token missing"

    if clash:

        @server.tool(name="get.memories")
        def get_memories_again() -> str:
            """The same name as get_memories once sanitized."""
            return "clash"

    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--http", type=int, default=None)
    parser.add_argument("--calls", type=Path, default=None)
    parser.add_argument("--clash", action="store_true")
    options = parser.parse_args()
    server = build(options.calls, options.clash)
    if options.http is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=options.http)


if __name__ == "__main__":
    main()
