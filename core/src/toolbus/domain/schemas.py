"""Tool lists in the shapes LLM APIs take: OpenAI functions, MCP tools, Anthropic tools."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any, Literal

from toolbus.domain.config import ToolDescriptor

ExportFormat = Literal["openai", "mcp", "anthropic"]


def json_schema(tool: ToolDescriptor) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, a fresh dict the caller may change.

    Each argument becomes a property with its ``type``, its ``description`` (when
    not empty) and its JSON-Schema extras; arguments are required unless they say
    ``"required": false``. The object stays open (no ``additionalProperties``):
    TrustGraph's arguments are untyped and the service validates them.
    """
    properties: dict[str, Any] = {}
    for argument in tool.arguments:
        prop: dict[str, Any] = {"type": argument.type}
        if argument.description:
            prop["description"] = argument.description
        prop.update(copy.deepcopy(dict(argument.schema_extras)))
        properties[argument.name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": [a.name for a in tool.arguments if a.required],
    }


def _openai(tool: ToolDescriptor) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.llm_name,
            "description": tool.description,
            "parameters": json_schema(tool),
        },
    }


def _mcp(tool: ToolDescriptor) -> dict[str, Any]:
    return {
        "name": tool.llm_name,
        "description": tool.description,
        "inputSchema": json_schema(tool),
    }


def _anthropic(tool: ToolDescriptor) -> dict[str, Any]:
    return {
        "name": tool.llm_name,
        "description": tool.description,
        "input_schema": json_schema(tool),
    }


_EXPORTERS: dict[str, Callable[[ToolDescriptor], dict[str, Any]]] = {
    "openai": _openai,
    "mcp": _mcp,
    "anthropic": _anthropic,
}
EXPORT_FORMATS: tuple[str, ...] = tuple(_EXPORTERS)


def export_tools(tools: Iterable[ToolDescriptor], format: ExportFormat) -> list[dict[str, Any]]:
    """The tools as an LLM API expects its tool list, named by their ``llm_name``.

    * ``openai``: ``{"type": "function", "function": {"name", "description", "parameters"}}``
    * ``mcp``: ``{"name", "description", "inputSchema"}``
    * ``anthropic``: ``{"name", "description", "input_schema"}``
    """
    exporter = _EXPORTERS.get(format)
    if exporter is None:
        raise ValueError(
            f"unknown tool-list format {format!r}; use one of {', '.join(EXPORT_FORMATS)}"
        )
    return [exporter(tool) for tool in tools]
