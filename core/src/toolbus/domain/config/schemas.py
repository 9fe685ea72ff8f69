"""Tool lists in the shapes LLM APIs take: OpenAI functions, MCP tools, Anthropic tools."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from typing import Any, Literal

from toolbus.domain.config.descriptors import ToolDescriptor

ExportFormat = Literal["openai", "mcp", "anthropic"]


def json_schema(tool: ToolDescriptor) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, a fresh dict the caller may change.

    Each argument becomes a property with its ``type``, its ``description`` (when
    not empty) and its JSON-Schema extras; arguments are required unless they say
    ``"required": false``. The object stays open (no ``additionalProperties``):
    TrustGraph's arguments are untyped and the service validates them.

    Argument options shape it too: fixed and environment-injected arguments are
    left out (the LLM must neither see nor set them), and an argument with a
    default shows it, unrendered, and is not required.
    """
    hidden = tool.options.hidden
    defaults = tool.options.defaults
    properties: dict[str, Any] = {}
    required = []
    for argument in tool.arguments:
        if argument.name in hidden:
            continue
        prop: dict[str, Any] = {"type": argument.type}
        if argument.description:
            prop["description"] = argument.description
        prop.update(copy.deepcopy(dict(argument.schema_extras)))
        if argument.name in defaults:
            prop["default"] = copy.deepcopy(defaults[argument.name])
        elif argument.required:
            required.append(argument.name)
        properties[argument.name] = prop
    return {"type": "object", "properties": properties, "required": required}


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
