"""Tool lists for LLM APIs: OpenAI, MCP and Anthropic shapes."""

from __future__ import annotations

from typing import Any

import pytest

from toolbus.domain.config.descriptors import ToolArgument, ToolDescriptor
from toolbus.domain.config.schemas import export_tools, json_schema

JOKE = ToolDescriptor(
    key="joke",
    type="tool-service",
    name="tell joke",
    description="Tell a joke on a given topic",
    service="joke-service",
    arguments=(
        ToolArgument("topic", "string", "The topic", schema_extras={"enum": ["cats", "dogs"]}),
        ToolArgument(
            "count",
            "integer",
            "How many",
            required=False,
            schema_extras={"minimum": 1, "default": 1},
        ),
        ToolArgument("tags", "array", "", schema_extras={"items": {"type": "string"}}),
    ),
)
SCHEMA = {
    "type": "object",
    "properties": {
        "topic": {"type": "string", "description": "The topic", "enum": ["cats", "dogs"]},
        "count": {"type": "integer", "description": "How many", "minimum": 1, "default": 1},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["topic", "tags"],
}


def test_json_schema_describes_the_arguments() -> None:
    assert json_schema(JOKE) == SCHEMA


def test_json_schema_stays_open_to_extra_arguments() -> None:
    assert "additionalProperties" not in json_schema(JOKE)


def test_a_tool_without_arguments_takes_an_empty_object() -> None:
    bare = ToolDescriptor(key="t", type="tool-service", name="t", description="d")

    assert json_schema(bare) == {"type": "object", "properties": {}, "required": []}


def test_json_schema_returns_a_fresh_copy() -> None:
    schema = json_schema(JOKE)
    schema["properties"]["tags"]["items"]["type"] = "number"
    schema["required"].append("count")

    assert json_schema(JOKE) == SCHEMA


@pytest.mark.parametrize(
    ("format", "expected"),
    [
        (
            "openai",
            {
                "type": "function",
                "function": {
                    "name": "tell_joke",
                    "description": "Tell a joke on a given topic",
                    "parameters": SCHEMA,
                },
            },
        ),
        (
            "mcp",
            {
                "name": "tell_joke",
                "description": "Tell a joke on a given topic",
                "inputSchema": SCHEMA,
                "execution": {"taskSupport": "optional"},
            },
        ),
        (
            "anthropic",
            {
                "name": "tell_joke",
                "description": "Tell a joke on a given topic",
                "input_schema": SCHEMA,
            },
        ),
    ],
)
def test_export_formats(format: Any, expected: dict[str, Any]) -> None:
    assert export_tools([JOKE], format) == [expected]


def test_export_keeps_the_order_given() -> None:
    other = ToolDescriptor(key="o", type="tool-service", name="other", description="d")

    exported = export_tools((t for t in [other, JOKE]), "mcp")

    assert [t["name"] for t in exported] == ["other", "tell_joke"]


def test_an_unknown_format_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match="use one of openai, mcp, anthropic"):
        export_tools([JOKE], "gemini")  # type: ignore[arg-type]


GIVEN = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"city": {"type": "string"}}}},
    "properties": {
        "name": {"type": "string", "description": "who"},
        "address": {"$ref": "#/$defs/address"},
        "tenant": {"type": "string"},
        "limit": {"type": "integer"},
    },
    "required": ["name", "tenant", "limit"],
    "allOf": [{"anyOf": [{"required": ["name"]}, {"required": ["address"]}]}],
    "additionalProperties": False,
}


def _loaded(tool: dict[str, Any]) -> Any:
    from toolbus.domain.config.loading import load_registry

    snapshot = {
        "tool-service": {"s": {"id": "s", "request-queue": "q", "response-queue": "r"}},
        "tool": {
            "t": {"type": "tool-service", "name": "t", "description": "d", "service": "s", **tool}
        },
    }
    return load_registry(snapshot).tool("t")


def test_an_input_schema_is_shown_as_written_and_its_arguments_derived_from_it() -> None:
    tool = _loaded({"input-schema": GIVEN})

    assert json_schema(tool) == GIVEN  # $schema, $defs, allOf, additionalProperties kept
    assert json_schema(tool) is not json_schema(tool)  # a fresh copy each time
    assert [(a.name, a.type, a.required) for a in tool.arguments] == [
        ("name", "string", True),
        ("address", "object", False),
        ("tenant", "string", True),
        ("limit", "integer", True),
    ]


def test_argument_options_shape_an_input_schema_as_they_shape_arguments() -> None:
    options = {"args": {"fixed": {"tenant": "acme"}, "defaults": {"limit": 10}}}
    tool = _loaded({"input-schema": GIVEN, "options": options})

    schema = json_schema(tool)
    assert "tenant" not in schema["properties"]
    assert schema["properties"]["limit"] == {"type": "integer", "default": 10}
    assert schema["required"] == ["name"]
    assert schema["$defs"] == GIVEN["$defs"] and schema["additionalProperties"] is False


@pytest.mark.parametrize(
    ("tool", "problem"),
    [
        ({"input-schema": {"type": "array"}}, "must describe an object"),
        ({"input-schema": "a schema"}, "must be a JSON Schema object like"),
        ({"input-schema": {"type": "object", "properties": []}}, "'properties' must map"),
        ({"input-schema": {"type": "object", "required": "name"}}, "'required' must be a list"),
        (
            {
                "input-schema": GIVEN,
                "arguments": [{"name": "x", "type": "string", "description": ""}],
            },
            "both describe the arguments",
        ),
    ],
    ids=["not-an-object", "not-a-mapping", "properties", "required", "both"],
)
def test_an_input_schema_that_cannot_be_one_is_refused_naming_the_fix(
    tool: dict[str, Any], problem: str
) -> None:
    from toolbus.domain.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        _loaded(tool)
    assert problem in str(refused.value)


@pytest.mark.parametrize(
    ("more", "given", "takes_more"),
    [
        (False, {}, False),  # the default: no others
        (True, {}, True),
        ({"type": "string"}, {}, True),  # others, of a schema
        (True, {"additional-arguments": False}, False),  # the tool says otherwise
        (False, {"additional-arguments": True}, True),
    ],
    ids=["closed", "open", "open-typed", "tool-closes", "tool-opens"],
)
def test_an_input_schema_allowing_more_properties_takes_undeclared_arguments(
    more: Any, given: dict[str, Any], takes_more: bool
) -> None:
    tool = _loaded({"input-schema": {**GIVEN, "additionalProperties": more}, **given})

    assert tool.additional_arguments is takes_more
    assert tool.undeclared({"name": "x", "other": 1}) == ([] if takes_more else ["other"])
