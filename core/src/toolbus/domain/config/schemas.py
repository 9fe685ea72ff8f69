"""Tool lists in the shapes LLM APIs take: OpenAI functions, MCP tools, Anthropic tools."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Literal

from toolbus.domain.config.descriptors import JSON_SCHEMA_TYPES, ToolDescriptor

ExportFormat = Literal["openai", "mcp", "anthropic"]


def json_schema(tool: ToolDescriptor) -> dict[str, Any]:
    """The JSON Schema of a tool's arguments, a fresh dict the caller may change.

    Each argument becomes a property with its ``type``, its ``description`` (when
    not empty) and its JSON-Schema extras; arguments are required unless they say
    ``"required": false``. The object stays open (no ``additionalProperties``,
    which some LLM APIs refuse); front doors refuse the arguments a tool does
    not take themselves (:meth:`~toolbus.domain.config.descriptors.ToolDescriptor.undeclared`).

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


_DROPPED_KEYWORDS = frozenset({"title", "type", "description", "anyOf", "$ref", "allOf"})


def arguments_from_schema(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Tool-descriptor ``arguments`` from the JSON Schema of a service's arguments.

    The other way round from :func:`json_schema`: what a typed tool function's
    schema says (type, description, required, constraints) becomes argument
    entries, so a plugin or an announcement need not write them again.
    """
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return []
    required = set(schema.get("required") or ())
    arguments = []
    for name, spec in properties.items():
        spec = spec if isinstance(spec, Mapping) else {}
        argument: dict[str, Any] = {
            "name": name,
            "type": _json_type(spec),
            "description": str(spec.get("description") or spec.get("title") or name),
        }
        if name not in required:
            argument["required"] = False
        argument.update(
            (key, value)
            for key, value in spec.items()
            if key not in _DROPPED_KEYWORDS and not key.startswith("$")
        )
        arguments.append(argument)
    return arguments


def _json_type(spec: Mapping[str, Any]) -> str:
    # pydantic writes Optional[X] as anyOf [X, null] and models as $ref: take the
    # first concrete type, else call it an object (a $ref) or a string.
    kind = spec.get("type")
    if isinstance(kind, str) and kind in JSON_SCHEMA_TYPES:
        return kind
    for option in spec.get("anyOf") or ():
        if isinstance(option, Mapping):
            kind = option.get("type")
            if isinstance(kind, str) and kind in JSON_SCHEMA_TYPES and kind != "null":
                return kind
    return "object" if "$ref" in spec or "allOf" in spec else "string"
