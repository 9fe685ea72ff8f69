"""The tools the official MCP conformance suite calls, as a tool service on the bus.

The suite's server scenarios call tools by name and check what they answer
(``test_simple_text`` answers a fixed sentence, ``slow_compute`` sleeps, ...).
These services answer them the way a bus tool can (text); :func:`snapshot` is a
configuration offering them, with the ``task-support`` each scenario expects.
The tasks tests of this package use them too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.domain.errors import ToolServiceError

SIMPLE_TEXT = "This is a simple text response for testing."
ERROR_TEXT = "This tool intentionally returns an error for testing"


@tool_service("conformance-greet")
async def greet(name: str) -> str:
    return f"Hello, {name}!"


@tool_service("conformance-compute")
async def slow_compute(seconds: float = 0.0, label: str = "") -> str:
    await anyio.sleep(seconds)
    return f"computed {label or 'nothing'} in {seconds:g}s"


@tool_service("conformance-failing")
async def failing_job() -> str:
    await anyio.sleep(1.0)
    raise ToolServiceError("the job failed, as it always does")


@tool_service("conformance-delete")
async def confirm_delete(filename: str) -> str:
    return f"deleted {filename}"


@tool_service("conformance-text")
async def simple_text() -> str:
    return SIMPLE_TEXT


@tool_service("conformance-error")
async def error_handling() -> str:
    raise ToolServiceError(ERROR_TEXT)


@tool_service("conformance-progress")
async def with_progress() -> AsyncIterator[str]:
    for step in (0, 50, 100):
        yield f"{step}/100 "
        if step < 100:
            await anyio.sleep(0.05)


@tool_service("conformance-schema")
async def schema_keywords(arguments: dict[str, Any]) -> str:
    return f"got {sorted(arguments)}"


#: The input schema of the suite's JSON Schema 2020-12 scenario, root keywords and all.
JSON_SCHEMA_2020_12: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {
        "address": {
            "$anchor": "addressDef",
            "type": "object",
            "properties": {"street": {"type": "string"}, "city": {"type": "string"}},
        }
    },
    "properties": {
        "name": {"type": "string"},
        "address": {"$ref": "#/$defs/address"},
        "contactMethod": {"type": "string", "enum": ["phone", "email"]},
        "phone": {"type": "string"},
        "email": {"type": "string"},
    },
    "allOf": [{"anyOf": [{"required": ["phone"]}, {"required": ["email"]}]}],
    "if": {"properties": {"contactMethod": {"const": "phone"}}, "required": ["contactMethod"]},
    "then": {"required": ["phone"]},
    "else": {"required": ["email"]},
    "additionalProperties": False,
}


SERVICES: tuple[FunctionToolService, ...] = (
    greet,
    slow_compute,
    failing_job,
    confirm_delete,
    simple_text,
    error_handling,
    with_progress,
    schema_keywords,
)


def _tool(
    name: str,
    service: FunctionToolService,
    description: str,
    arguments: list[dict[str, Any]],
    task_support: str = "optional",
) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": description,
        "service": service.id,
        "arguments": arguments,
        "task-support": task_support,
    }


def snapshot() -> dict[str, Any]:
    """A configuration offering the suite's tools (in the default group)."""
    text = {"type": "string"}
    tools = [
        _tool(
            "greet",
            greet,
            "Greets a person",
            [{"name": "name", **text, "description": "whom"}],
            "forbidden",
        ),
        _tool(
            "slow_compute",
            slow_compute,
            "Computes for a number of seconds",
            [
                {"name": "seconds", "type": "number", "description": "how long"},
                {"name": "label", **text, "description": "a label", "required": False},
            ],
        ),
        _tool("failing_job", failing_job, "A job that fails", [], "required"),
        _tool(
            "confirm_delete",
            confirm_delete,
            "Deletes a file once its caller confirms",
            [{"name": "filename", **text, "description": "the file"}],
        ),
        _tool("test_simple_text", simple_text, "Answers a simple text", [], "forbidden"),
        _tool("test_error_handling", error_handling, "Answers an error", [], "forbidden"),
        _tool("test_tool_with_progress", with_progress, "Reports progress", [], "forbidden"),
        _tool(
            "test_headers",
            greet,
            "Greets a person, the name mirrored in a header",
            [{"name": "name", **text, "description": "whom", "x-mcp-header": "Name"}],
            "forbidden",
        ),
        {
            "type": "tool-service",
            "name": "json_schema_2020_12_tool",
            "description": "Takes arguments a JSON Schema 2020-12 describes",
            "service": schema_keywords.id,
            "input-schema": JSON_SCHEMA_2020_12,
        },
    ]
    return {
        "tool-service": {service.id: service.descriptor() for service in SERVICES},
        "tool": {tool["name"]: tool for tool in tools},
    }


#: ``[approvals]`` for the suite: deleting a file needs its caller's confirmation.
APPROVALS: dict[str, Any] = {
    "approvers": ["ops"],
    "callers-approve": True,
    "tools": ["confirm_delete"],
}
