"""The MCP bridge: bus tools as an MCP server, and MCP servers as tool services.

* :class:`BusMcpServer` serves the bus's tools to MCP clients, each caller
  offered what an agent session would offer them (``toolbus mcp serve``).
* :class:`McpToolset` serves an MCP server's tools on the bus as a tool
  service, announced as ``TOOLSET_TOOL`` (``toolbus serve mcp``).

See docs/mcp.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from toolbus_mcp.server import WORKFLOW_META_KEY, BusMcpServer, McpCaller, Workflow
    from toolbus_mcp.toolsets import (
        McpServerAddress,
        McpToolService,
        McpToolset,
        ToolsetUnavailable,
    )
    from toolbus_mcp.translation import (
        MCP_TOOL_PARAM,
        observation,
        toolset_tool_name,
        toolset_tools,
    )
    from toolbus_mcp.transports import (
        CallerGate,
        ListenError,
        http_app,
        serve_http,
        serve_stdio,
    )

# The MCP SDK takes seconds to import; the package stays light until a name
# is used, so that loading the commands (toolbus --help) does not pay for it.
_HOMES = {
    "WORKFLOW_META_KEY": "server",
    "BusMcpServer": "server",
    "McpCaller": "server",
    "Workflow": "server",
    "McpServerAddress": "toolsets",
    "McpToolService": "toolsets",
    "McpToolset": "toolsets",
    "ToolsetUnavailable": "toolsets",
    "MCP_TOOL_PARAM": "translation",
    "observation": "translation",
    "toolset_tool_name": "translation",
    "toolset_tools": "translation",
    "CallerGate": "transports",
    "ListenError": "transports",
    "http_app": "transports",
    "serve_http": "transports",
    "serve_stdio": "transports",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'toolbus_mcp' has no attribute {name!r}")
    return getattr(importlib.import_module(f"toolbus_mcp.{home}"), name)


__all__ = [
    "MCP_TOOL_PARAM",
    "WORKFLOW_META_KEY",
    "BusMcpServer",
    "CallerGate",
    "ListenError",
    "McpCaller",
    "McpServerAddress",
    "McpToolService",
    "McpToolset",
    "ToolsetUnavailable",
    "Workflow",
    "http_app",
    "observation",
    "serve_http",
    "serve_stdio",
    "toolset_tool_name",
    "toolset_tools",
]
