"""Translating between MCP and toolbus: tool lists into descriptors, results into observations.

Pure functions, no I/O: what an MCP server lists becomes the tool descriptors
its toolset announces, and what a ``tools/call`` answers becomes an
observation (or a tool error).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Literal

import mcp_types as mcp

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.errors import ConfigError, Problem, ToolServiceError
from toolbus.domain.live.announcements import derived_tool

#: The config param telling a toolset's service which MCP tool a descriptor calls.
MCP_TOOL_PARAM = "mcp-tool"

#: Which of a toolset's tools need a person's approval: none, those MCP's hints
#: call destructive, or all.
Approve = Literal["none", "destructive", "all"]
APPROVE_CHOICES: tuple[Approve, ...] = ("none", "destructive", "all")


def hints(tool: mcp.Tool) -> dict[str, bool]:
    """The MCP tool's annotations, by MCP's names, as a descriptor's ``annotations``."""
    given = tool.annotations
    if given is None:
        return {}
    found = {
        "readOnlyHint": given.read_only_hint,
        "destructiveHint": given.destructive_hint,
        "idempotentHint": given.idempotent_hint,
        "openWorldHint": given.open_world_hint,
    }
    return {name: value for name, value in found.items() if value is not None}


def destructive(tool: mcp.Tool) -> bool:
    """Whether MCP's hints say the tool may destroy something.

    As MCP defines them: a tool that is not read-only may be destructive unless
    it says it is not (``destructiveHint`` defaults to true).
    """
    given = hints(tool)
    return not given.get("readOnlyHint", False) and given.get("destructiveHint", True)


def toolset_tool_name(toolset: str, tool: str) -> str:
    """The bus name of MCP tool ``tool`` of ``toolset``: what hooks' toolset/tool names give."""
    return sanitize_toolname(f"{toolset}_{tool}")


def toolset_tools(
    toolset: str,
    tools: Iterable[mcp.Tool],
    *,
    groups: Sequence[str] | None = None,
    approve: Approve = "none",
) -> dict[str, dict[str, Any]]:
    """Tool descriptors (keyed by bus name) for the tools an MCP server lists.

    Each is named :func:`toolset_tool_name`, described as the server describes
    it, takes the arguments of its input schema, and carries the MCP tool's own
    name as the config value :data:`MCP_TOOL_PARAM`. ``groups`` (when given)
    is every tool's ``group``. The MCP tool's hints become its ``annotations``
    (policies see them); ``approve`` says which tools need approval
    (``"approval": "always"``): ``destructive`` ones by those hints, or ``all``.

    Raises :class:`ConfigError` naming both tools when two names become one
    after sanitizing: calls could not tell them apart.
    """
    found: dict[str, dict[str, Any]] = {}
    problems: list[Problem] = []
    for tool in tools:
        name = toolset_tool_name(toolset, tool.name)
        clash = found.get(name)
        if clash is not None:
            problems.append(
                Problem(
                    f"MCP toolset {toolset!r}",
                    "",
                    f"tools {clash[MCP_TOOL_PARAM]!r} and {tool.name!r} both become {name!r} "
                    "as bus tool names; rename one of them in the MCP server",
                )
            )
            continue
        derived = derived_tool(toolset, None, tool.input_schema)
        descriptor: dict[str, Any] = {
            "name": name,
            "description": " ".join((tool.description or "").split())
            or f"The {tool.name} tool of the MCP server {toolset}",
            MCP_TOOL_PARAM: tool.name,
        }
        for taken in ("arguments", "additional-arguments"):
            if taken in derived:
                descriptor[taken] = derived[taken]
        if groups is not None:
            descriptor["group"] = list(groups)
        annotations = hints(tool)
        if annotations:
            descriptor["annotations"] = annotations
        if approve == "all" or (approve == "destructive" and destructive(tool)):
            descriptor["approval"] = "always"
        found[name] = descriptor
    if problems:
        raise ConfigError(problems)
    return found


def observation(toolset: str, tool: str, result: mcp.CallToolResult) -> str:
    """The observation for an MCP tool result; raises for an ``isError`` result.

    Text content becomes the observation as it is (blocks joined by newlines).
    Any other content (images, resources, links) is JSON: the list of content
    blocks as MCP writes them, or the structured content when there is no
    content at all. An error result raises
    :class:`~toolbus.domain.errors.ToolServiceError` with the server's message.
    """
    blocks = result.content
    texts = [block.text for block in blocks if isinstance(block, mcp.TextContent)]
    if result.is_error:
        message = "\n".join(texts) or "the MCP server reported an error without a message"
        raise ToolServiceError(f"MCP tool {tool!r} of toolset {toolset!r} failed: {message}")
    if blocks and len(texts) == len(blocks):
        return "\n".join(texts)
    if not blocks and result.structured_content is not None:
        return json.dumps(result.structured_content, ensure_ascii=False)
    return json.dumps(
        [block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in blocks],
        ensure_ascii=False,
    )
