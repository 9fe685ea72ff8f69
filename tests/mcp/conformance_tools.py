"""The tools the official MCP conformance suite calls, as a tool service on the bus.

The suite's server scenarios call tools by name and check what they answer
(``test_simple_text`` answers a fixed sentence, ``slow_compute`` sleeps, ...).
These services answer them the way a bus tool can (text), and the tools that
ask their caller (``test_input_required_result_*``, ``test_sampling``,
``test_elicitation``, ...) ask with :func:`~toolbus.ask`; :func:`snapshot` is a
configuration offering them, with the ``task-support`` each scenario expects.
The tasks tests of this package use them too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio

from toolbus import (
    Elicitation,
    ElicitationAnswer,
    RootsRequest,
    Sampling,
    ask,
    ask_all,
    can_ask,
    carried,
)
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


def _form(**properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(properties)}


NAME_FORM = _form(name={"type": "string"})


@tool_service("conformance-ask-elicitation")
async def ask_name() -> str:
    answer = await ask(Elicitation("What is your name?", NAME_FORM), key="user_name")
    return f"Hello, {answer.content.get('name', 'nobody')}!"


@tool_service("conformance-ask-sampling")
async def ask_capital() -> str:
    answer = await ask(
        Sampling(["What is the capital of France?"], max_tokens=100), key="capital_question"
    )
    return answer.text


@tool_service("conformance-ask-roots")
async def ask_roots() -> str:
    answer = await ask(RootsRequest(), key="client_roots")
    return "roots: " + ", ".join(root.uri for root in answer.roots)


@tool_service("conformance-ask-state")
async def ask_with_state() -> str:
    confirm = Elicitation("Please confirm", _form(ok={"type": "boolean"}))
    answer = await ask(confirm, key="confirm", carry={"asked": "confirm"})
    ok = carried() == {"asked": "confirm"}
    return f"{'state-ok' if ok else 'state-lost'}: confirmed {answer.content.get('ok')}"


@tool_service("conformance-ask-several")
async def ask_several() -> str:
    answers = await ask_all(
        {
            "user_name": Elicitation("What is your name?", NAME_FORM),
            "greeting": Sampling(["Generate a greeting"], max_tokens=50),
            "client_roots": RootsRequest(),
        }
    )
    return f"got {sorted(answers)}"


@tool_service("conformance-ask-rounds")
async def ask_rounds() -> str:
    name = await ask(Elicitation("Step 1: What is your name?", NAME_FORM), key="step1")
    color_form = _form(color={"type": "string"})
    color = await ask(Elicitation("Step 2: What is your favorite color?", color_form), key="step2")
    return f"{name.content.get('name')} likes {color.content.get('color')}"


@tool_service("conformance-ask-capabilities")
async def ask_what_it_can() -> str:
    requests: dict[str, Elicitation | Sampling] = {"summary": Sampling(["Summarise"], 50)}
    if can_ask("elicitation"):
        requests["confirm"] = Elicitation("Confirm?", _form(ok={"type": "boolean"}))
    answers = await ask_all(requests)
    return f"answered {sorted(answers)}"


@tool_service("conformance-sampling")
async def sampling(prompt: str) -> str:
    answer = await ask(Sampling([prompt], max_tokens=100))
    return f"LLM response: {answer.text}"


@tool_service("conformance-elicitation")
async def elicitation(message: str) -> str:
    form = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    answer = await ask(Elicitation(message, form))
    return f"User response: action={answer.action}, content={dict(answer.content)}"


DEFAULTS_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "score": {"type": "number", "default": 95.5},
        "status": {
            "type": "string",
            "enum": ["active", "inactive", "pending"],
            "default": "active",
        },
        "verified": {"type": "boolean", "default": True},
    },
}
ENUMS_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "untitledSingle": {"type": "string", "enum": ["option1", "option2", "option3"]},
        "titledSingle": {
            "type": "string",
            "oneOf": [
                {"const": "value1", "title": "First Option"},
                {"const": "value2", "title": "Second Option"},
                {"const": "value3", "title": "Third Option"},
            ],
        },
        "legacyEnum": {
            "type": "string",
            "enum": ["opt1", "opt2", "opt3"],
            "enumNames": ["Option One", "Option Two", "Option Three"],
        },
        "untitledMulti": {
            "type": "array",
            "items": {"type": "string", "enum": ["option1", "option2", "option3"]},
        },
        "titledMulti": {
            "type": "array",
            "items": {
                "anyOf": [
                    {"const": "value1", "title": "First Choice"},
                    {"const": "value2", "title": "Second Choice"},
                    {"const": "value3", "title": "Third Choice"},
                ]
            },
        },
    },
}


@tool_service("conformance-elicit-form")
async def elicit_form(form: str) -> str:
    schema = {"defaults": DEFAULTS_FORM, "enums": ENUMS_FORM}[form]
    answer = await ask(Elicitation(f"Please fill in the {form} form", schema))
    return f"Elicitation completed: action={answer.action}, content={dict(answer.content)}"


@tool_service("conformance-fan-out")
async def fan_out() -> str:
    answers = await ask_all(
        {
            "first": Elicitation("First?", _form(confirm={"type": "boolean"})),
            "second": Elicitation("Second?", _form(confirm={"type": "boolean"})),
        }
    )
    accepted = [key for key, answer in answers.items() if isinstance(answer, ElicitationAnswer)]
    return f"both answered: {sorted(accepted)}"


@tool_service("conformance-then-task")
async def name_then_work() -> str:
    answer = await ask(Elicitation("What is your name?", NAME_FORM), key="user_name")
    await anyio.sleep(1.0)  # the long work, once the name is known: the call becomes a task
    return f"Done for {answer.content.get('name')}"


SERVICES: tuple[FunctionToolService, ...] = (
    greet,
    slow_compute,
    failing_job,
    confirm_delete,
    simple_text,
    error_handling,
    with_progress,
    schema_keywords,
    ask_name,
    ask_capital,
    ask_roots,
    ask_with_state,
    ask_several,
    ask_rounds,
    ask_what_it_can,
    sampling,
    elicitation,
    elicit_form,
    fan_out,
    name_then_work,
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


def _fixed(name: str, service: FunctionToolService, form: str) -> dict[str, Any]:
    """A tool of ``service`` whose ``form`` argument is set by its descriptor."""
    tool = _tool(name, service, f"Asks with the {form} form", [], "forbidden")
    tool["options"] = {"args": {"fixed": {"form": form}}}
    return tool


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
        *(
            _tool(f"test_input_required_result_{name}", service, f"Asks: {name}", [], "forbidden")
            for name, service in [
                ("elicitation", ask_name),
                ("sampling", ask_capital),
                ("list_roots", ask_roots),
                ("request_state", ask_with_state),
                ("multiple_inputs", ask_several),
                ("multi_round", ask_rounds),
                ("tampered_state", ask_with_state),
                ("capabilities", ask_what_it_can),
            ]
        ),
        _tool(
            "test_sampling",
            sampling,
            "Asks the caller's model",
            [{"name": "prompt", **text, "description": "the prompt"}],
            "forbidden",
        ),
        _tool(
            "test_elicitation",
            elicitation,
            "Asks the caller's person",
            [{"name": "message", **text, "description": "the message"}],
            "forbidden",
        ),
        _fixed("test_elicitation_sep1034_defaults", elicit_form, "defaults"),
        _fixed("test_elicitation_sep1330_enums", elicit_form, "enums"),
        _tool("test_missing_capability", ask_capital, "Needs sampling", [], "forbidden"),
        _tool("multi_input", fan_out, "Asks two questions at once", [], "required"),
        _tool("test_tool_with_task", name_then_work, "Asks, then works long", []),
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
