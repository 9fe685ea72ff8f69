"""What a tool asks its caller, in A2A messages: :func:`question_parts`, :func:`read_answers`.

While a tool of the agent's run asks (a form, MCP's elicitation), the task is
``input-required`` and its status message carries the question: a text part
(the forms' messages) and a data part with the requests as MCP writes them, by
key::

    {"requests": {"elicitation-1": {"method": "elicitation/create", "params": {...}}}}

The caller answers with a message naming the task (``taskId``) whose data part
holds the answers by key, as MCP's client writes them::

    {"responses": {"elicitation-1": {"action": "accept", "content": {"sure": true}}}}

A text reply answers too when it cannot be read two ways: one form is asked,
with one field of a plain type; the text is that field's value (``yes``/``no``
for a yes-or-no field, a number for a number, one of the options for a
choice), and the form is accepted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from a2a.types import Message, Part
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Value

from toolbus.domain.calls.input_requests import (
    Elicitation,
    InputRequest,
    answer_from_json,
    answer_to_json,
    request_from_json,
)
from toolbus.domain.errors import WireError

#: Words a yes-or-no field reads from a text reply.
_YES = frozenset({"yes", "y", "true"})
_NO = frozenset({"no", "n", "false"})
_FORM_ANSWER = '{"action": "accept", "content": {...}} (or "decline", or "cancel")'


def _requests(pending: Mapping[str, Any]) -> dict[str, InputRequest]:
    found = {}
    for key, written in pending.items():
        try:
            found[key] = request_from_json(written)
        except WireError:
            continue  # not one toolbus reads: never asked of an A2A caller
    return found


def question_text(pending: Mapping[str, Any]) -> str:
    """The questions in words: the form's message, or each form's by key."""
    messages = {
        key: request.message
        for key, request in _requests(pending).items()
        if isinstance(request, Elicitation)
    }
    if len(messages) == 1:
        return next(iter(messages.values()))
    return "\n".join(f"{key}: {message}" for key, message in messages.items()) or (
        "the tool asks: " + ", ".join(pending)
    )


def question_parts(pending: Mapping[str, Any]) -> list[Part]:
    """The parts of a status message asking ``pending`` (by key, as MCP writes them)."""
    data = Value()
    data.struct_value.update({"requests": dict(pending)})
    return [Part(text=question_text(pending)), Part(data=data)]


def _data(message: Message) -> list[Any]:
    return [MessageToDict(part)["data"] for part in message.parts if part.HasField("data")]


def _text(message: Message) -> str:
    return "\n".join(part.text for part in message.parts if part.HasField("text")).strip()


def read_answers(message: Message, task_id: str, pending: Mapping[str, Any]) -> dict[str, Any]:
    """The answers ``message`` gives to ``pending`` (by key, MCP's JSON), checked against
    what each request asks; A2A's ``InvalidParams`` naming the key and the fix."""
    keys = ", ".join(map(repr, pending))
    data = [given for given in _data(message) if isinstance(given, dict) and "responses" in given]
    if not data:
        return _text_answer(_text(message), task_id, pending)
    if len(data) > 1:
        raise InvalidParamsError(
            message=f"the message has {len(data)} data parts with 'responses'; put every "
            "answer in one"
        )
    responses = data[0]["responses"]
    if not isinstance(responses, dict) or not responses:
        raise InvalidParamsError(
            message=f"'responses' must be an object of answers by key; task {task_id} asks {keys}"
        )
    requests = _requests(pending)
    answers = {}
    for key, given in responses.items():
        request = requests.get(key)
        if request is None:
            raise InvalidParamsError(
                message=f"responses[{key!r}]: task {task_id} does not ask that; it asks {keys}"
            )
        answers[key] = _checked(key, request, given)
    return answers


def _checked(key: str, request: InputRequest, given: Any) -> dict[str, Any]:
    try:
        answer = answer_from_json(request, given)
    except ValueError as exc:
        fix = _FORM_ANSWER if isinstance(request, Elicitation) else "an answer as MCP's client"
        raise InvalidParamsError(message=f"responses[{key!r}]: {exc}; send {fix}") from None
    if isinstance(request, Elicitation) and answer_to_json(answer)["action"] == "accept":
        problem = _form_problem(request.schema, answer_to_json(answer)["content"])
        if problem is not None:
            raise InvalidParamsError(message=f"responses[{key!r}].content: {problem}")
    written: dict[str, Any] = answer_to_json(answer)
    return written


def _fields(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: field for name, field in properties.items() if isinstance(field, Mapping)}


def _fits(field: Mapping[str, Any], value: Any) -> bool:
    if "enum" in field and isinstance(field["enum"], list):
        return value in field["enum"]
    kind = field.get("type")
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return True


def _expected(field: Mapping[str, Any]) -> str:
    if "enum" in field and isinstance(field["enum"], list):
        return "one of " + ", ".join(json.dumps(option) for option in field["enum"])
    return {"boolean": "true or false", "integer": "an integer", "number": "a number"}.get(
        str(field.get("type")), "a string"
    )


def _form_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """What is wrong with ``content`` as the form ``schema`` asks it, or ``None``."""
    fields = _fields(schema)
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if name not in content:
            return f"the form requires {name!r} ({_expected(fields.get(name, {}))})"
    for name, value in content.items():
        field = fields.get(name)
        if field is None:
            return f"the form has no field {name!r}; it has {', '.join(map(repr, fields))}"
        if not _fits(field, value):
            return f"{name!r} must be {_expected(field)}, not {json.dumps(value)}"
    return None


def _text_answer(text: str, task_id: str, pending: Mapping[str, Any]) -> dict[str, Any]:
    """A text reply read as the one form's one field, when it can be read only so."""
    shape = f'a data part {{"responses": {{KEY: {_FORM_ANSWER}}}}}'
    requests = _requests(pending)
    only = next(iter(requests.values())) if len(requests) == 1 else None
    fields = _fields(only.schema) if isinstance(only, Elicitation) else {}
    if not text or only is None or len(fields) != 1:
        why = "has no answer" if not text else "cannot be read as one answer"
        raise InvalidParamsError(
            message=f"the message {why}: task {task_id} asks "
            f"{', '.join(map(repr, pending))}; answer with {shape}"
        )
    [(name, field)] = fields.items()
    value = _value_of(text, field)
    if value is None:
        raise InvalidParamsError(
            message=f"{text[:80]!r} is not {_expected(field)}, which {name!r} asks; answer "
            f"with that, or with {shape}"
        )
    [key] = requests
    return {key: {"action": "accept", "content": {name: value}}}


def _value_of(text: str, field: Mapping[str, Any]) -> Any:
    """``text`` as the value ``field`` takes, or ``None``."""
    if "enum" in field and isinstance(field["enum"], list):
        return text if text in field["enum"] else None
    kind = field.get("type")
    if kind == "boolean":
        word = text.lower().rstrip(".!")
        return True if word in _YES else False if word in _NO else None
    if kind in ("integer", "number"):
        try:
            number = float(text) if kind == "number" else int(text)
        except ValueError:
            return None
        return number
    return text if kind in (None, "string") else None
