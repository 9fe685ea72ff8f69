"""Tool lists in the shapes LLM APIs take: OpenAI functions, MCP tools, Anthropic tools."""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping
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

    A descriptor's ``input-schema`` is the schema instead, as written (root
    keywords such as ``$defs``, ``allOf`` or ``additionalProperties`` included),
    shaped by the argument options the same way.
    """
    hidden = tool.options.hidden
    defaults = tool.options.defaults
    if tool.input_schema is not None:
        return _given_schema(tool.input_schema, hidden, defaults)
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


def _given_schema(
    given: Mapping[str, Any], hidden: Collection[str], defaults: Mapping[str, Any]
) -> dict[str, Any]:
    """A descriptor's ``input-schema``, as is but for its argument options: hidden
    arguments left out, defaults shown (and no longer required)."""
    schema = copy.deepcopy(dict(given))
    if not hidden and not defaults:
        return schema
    properties = {
        name: spec for name, spec in schema.get("properties", {}).items() if name not in hidden
    }
    for name, value in defaults.items():
        if name in properties:
            properties[name] = {**properties[name], "default": copy.deepcopy(value)}
    schema["properties"] = properties
    if "required" in schema:
        schema["required"] = [
            name for name in schema["required"] if name not in hidden and name not in defaults
        ]
    return schema


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
        # Whether its calls may, must or never run as tasks (``task-support``).
        "execution": {"taskSupport": tool.task_support},
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
    * ``mcp``: ``{"name", "description", "inputSchema", "execution"}``
    * ``anthropic``: ``{"name", "description", "input_schema"}``
    """
    exporter = _EXPORTERS.get(format)
    if exporter is None:
        raise ValueError(
            f"unknown tool-list format {format!r}; use one of {', '.join(EXPORT_FORMATS)}"
        )
    return [exporter(tool) for tool in tools]


_DROPPED_KEYWORDS = frozenset({"title", "type", "description", "anyOf", "$ref", "allOf"})


def input_schema_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a tool's ``input-schema`` (the JSON Schema of an object:
    ``type`` object, ``properties`` by argument name, ``required`` names), or ``None``."""
    example = '{"type": "object", "properties": {"topic": {"type": "string"}}}'
    if not isinstance(value, Mapping):
        return f"must be a JSON Schema object like {example}, not {type(value).__name__}"
    if value.get("type") != "object":
        return f'must describe an object ("type": "object"), not {value.get("type")!r}'
    properties = value.get("properties", {})
    if not isinstance(properties, Mapping) or not all(
        isinstance(spec, Mapping) for spec in properties.values()
    ):
        return "'properties' must map each argument's name to its schema"
    required = value.get("required", [])
    if not isinstance(required, list) or not all(isinstance(name, str) for name in required):
        return "'required' must be a list of argument names"
    return None


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
