"""The MCP bridge: bus tools as an MCP server, and MCP servers as tool services.

* ``serving``: :class:`BusMcpServer` serves the bus's tools to MCP clients, each
  caller offered what an agent session would offer them (``toolbus mcp serve``).
* ``importing``: :class:`McpToolset` serves an MCP server's tools on the bus as a
  tool service, announced as ``TOOLSET_TOOL`` (``toolbus serve mcp``).
* ``commands``: both commands.

See docs/mcp.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus_mcp.importing.addresses import McpServerAddress
    from toolbus_mcp.importing.toolsets import (
        McpToolService,
        McpToolset,
        ToolsetUnavailable,
    )
    from toolbus_mcp.importing.translation import (
        MCP_TOOL_PARAM,
        observation,
        toolset_tool_name,
        toolset_tools,
    )
    from toolbus_mcp.serving.gate import CallerGate
    from toolbus_mcp.serving.server import WORKFLOW_META_KEY, BusMcpServer, McpCaller, Workflow
    from toolbus_mcp.serving.transports import (
        ListenError,
        http_app,
        serve_http,
        serve_stdio,
    )

# The MCP SDK takes seconds to import; the package stays light until a name
# is used, so that loading the commands (toolbus --help) does not pay for it.
_HOMES = {
    "WORKFLOW_META_KEY": "serving.server",
    "BusMcpServer": "serving.server",
    "McpCaller": "serving.server",
    "Workflow": "serving.server",
    "McpServerAddress": "importing.addresses",
    "McpToolService": "importing.toolsets",
    "McpToolset": "importing.toolsets",
    "ToolsetUnavailable": "importing.toolsets",
    "MCP_TOOL_PARAM": "importing.translation",
    "observation": "importing.translation",
    "toolset_tool_name": "importing.translation",
    "toolset_tools": "importing.translation",
    "CallerGate": "serving.gate",
    "ListenError": "serving.transports",
    "http_app": "serving.transports",
    "serve_http": "serving.transports",
    "serve_stdio": "serving.transports",
}


__getattr__ = lazy_exports(__name__, _HOMES)


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
