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

from collections.abc import Mapping
from typing import Any

from a2a.types import Message, Part
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Value

from toolbus.application.tasks import fitting_answers
from toolbus.application.tasks.asking import FORM_ANSWER
from toolbus.domain.calls.forms import expected_value, form_fields
from toolbus.domain.calls.input_requests import Elicitation, InputRequest, request_from_json
from toolbus.domain.errors import UnfitAnswers, WireError
from toolbus.domain.tasks import Task

#: Words a yes-or-no field reads from a text reply.
_YES = frozenset({"yes", "y", "true"})
_NO = frozenset({"no", "n", "false"})


def readable_requests(pending: Mapping[str, Any]) -> dict[str, InputRequest]:
    """The requests of ``pending`` (by key, as MCP writes them) that toolbus reads."""
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
        for key, request in readable_requests(pending).items()
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


def read_answers(message: Message, task: Task) -> dict[str, Any]:
    """The answers ``message`` gives to what ``task`` asks (by key, MCP's JSON), checked
    against each request; A2A's ``InvalidParams`` naming the key and the fix."""
    pending = task.input_requests or {}
    keys = ", ".join(map(repr, pending))
    data = [given for given in _data(message) if isinstance(given, dict) and "responses" in given]
    if not data:
        return _text_answer(_text(message), task.id, pending)
    if len(data) > 1:
        raise InvalidParamsError(
            message=f"the message has {len(data)} data parts with 'responses'; put every "
            "answer in one"
        )
    responses = data[0]["responses"]
    if not isinstance(responses, dict) or not responses:
        raise InvalidParamsError(
            message=f"'responses' must be an object of answers by key; task {task.id} asks {keys}"
        )
    try:
        return fitting_answers(task, responses)
    except UnfitAnswers as exc:
        raise InvalidParamsError(message=str(exc)) from None


def _text_answer(text: str, task_id: str, pending: Mapping[str, Any]) -> dict[str, Any]:
    """A text reply read as the one form's one field, when it can be read only so."""
    shape = f'a data part {{"responses": {{KEY: {FORM_ANSWER}}}}}'
    requests = readable_requests(pending)
    only = next(iter(requests.values())) if len(requests) == 1 else None
    fields = form_fields(only.schema) if isinstance(only, Elicitation) else {}
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
            message=f"{text[:80]!r} is not {expected_value(field)}, which {name!r} asks; answer "
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
