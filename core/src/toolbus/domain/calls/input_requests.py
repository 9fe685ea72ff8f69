"""What a tool may ask its caller for, and what the caller answers, as data.

A tool service may answer a call with *input requests* instead of a result:
each a question for whoever made the call, under a key the tool chose:

* :class:`Elicitation`: a message and a JSON Schema (flat, of primitive
  properties) for a person to fill in: a confirmation, a missing detail;
* :class:`Sampling`: messages for the caller's model to complete;
* :class:`RootsRequest`: the caller's workspace roots (``file://`` URIs).

The caller answers each with an :class:`ElicitationAnswer`, a
:class:`SamplingAnswer` or a :class:`RootsAnswer`, and calls again. On the
wire (and over MCP, which defined them) they are written as MCP writes them:
a request is ``{"method": "elicitation/create", "params": {...}}``
(``sampling/createMessage``, ``roots/list``), an answer is the result MCP's
client would send (``{"action": "accept", "content": {...}}``, ...). Params
toolbus does not model are kept as they came (:attr:`Sampling.extra`), so a
request passes through a door unchanged.

:class:`InputAsk` is a tool's side of one round (its requests, and the state
it sealed for its next call); :class:`InputReply` the caller's (the answers,
and that state, given back as it came).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, TypeAlias

from toolbus.domain.errors import BadRequest, ToolCallError, WireError, error_for

InputKind = Literal["elicitation", "sampling", "roots"]
#: Every kind of input a tool may ask for, in the order they are named in messages.
INPUT_KINDS: tuple[InputKind, ...] = ("elicitation", "sampling", "roots")
#: The MCP method of each kind's request.
METHODS: dict[InputKind, str] = {
    "elicitation": "elicitation/create",
    "sampling": "sampling/createMessage",
    "roots": "roots/list",
}
_KIND_OF_METHOD: dict[str, InputKind] = {method: kind for kind, method in METHODS.items()}
#: Characters of a request key that count; keys name requests in a round.
MAX_KEY = 100

ElicitationAction = Literal["accept", "decline", "cancel"]


@dataclass(frozen=True, slots=True)
class Elicitation:
    """Ask a person to fill in a form: ``message`` says what for, ``schema`` what to fill.

    ``schema`` is the JSON Schema of an object whose properties are strings,
    numbers, integers, booleans or enumerations (MCP's ``requestedSchema``);
    defaults in it fill fields a person leaves out (:func:`with_defaults`).
    """

    message: str
    schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    kind: ClassVar[InputKind] = "elicitation"

    def params(self) -> dict[str, Any]:
        return {"message": self.message, "requestedSchema": dict(self.schema)}


@dataclass(frozen=True, slots=True)
class Sampling:
    """Ask the caller's model to complete ``messages``.

    A message is a string (the user's text) or an MCP sampling message
    (``{"role": "user", "content": {"type": "text", "text": "..."}}``).
    ``extra`` holds further params of MCP's ``sampling/createMessage``
    (``modelPreferences``, ``includeContext``, ``metadata``, ...), passed as they are.
    """

    messages: Sequence[str | Mapping[str, Any]]
    max_tokens: int = 1000
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: Sequence[str] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)
    kind: ClassVar[InputKind] = "sampling"

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = dict(self.extra)
        params["messages"] = [_sampling_message(message) for message in self.messages]
        params["maxTokens"] = self.max_tokens
        if self.system_prompt is not None:
            params["systemPrompt"] = self.system_prompt
        if self.temperature is not None:
            params["temperature"] = self.temperature
        if self.stop_sequences:
            params["stopSequences"] = list(self.stop_sequences)
        return params

    def texts(self) -> list[tuple[str, str]]:
        """The messages as (role, text) pairs; content that is not text reads as ``""``."""
        pairs = []
        for message in self.params()["messages"]:
            content = message.get("content")
            blocks = content if isinstance(content, list) else [content]
            text = "".join(
                block.get("text", "")
                for block in blocks
                if isinstance(block, Mapping) and block.get("type") == "text"
            )
            pairs.append((str(message.get("role", "user")), text))
        return pairs


@dataclass(frozen=True, slots=True)
class RootsRequest:
    """Ask for the caller's workspace roots: the directories (``file://`` URIs) it works in."""

    kind: ClassVar[InputKind] = "roots"

    def params(self) -> dict[str, Any]:
        return {}


InputRequest: TypeAlias = Elicitation | Sampling | RootsRequest


@dataclass(frozen=True, slots=True)
class ElicitationAnswer:
    """A person's answer to an :class:`Elicitation`: ``accept`` (with ``content``, the
    form's values), ``decline`` (no) or ``cancel`` (dismissed without choosing)."""

    action: ElicitationAction
    content: Mapping[str, Any] = field(default_factory=dict)

    @property
    def accepted(self) -> bool:
        return self.action == "accept"


@dataclass(frozen=True, slots=True)
class SamplingAnswer:
    """The caller's model's completion: its ``text``, the ``model`` that wrote it, why it
    stopped (``endTurn``, ``maxTokens``, ...), and the content block as it came."""

    text: str
    model: str = ""
    stop_reason: str | None = "endTurn"
    role: str = "assistant"
    content: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Root:
    """One workspace root: a ``file://`` URI, and a name for people."""

    uri: str
    name: str | None = None


@dataclass(frozen=True, slots=True)
class RootsAnswer:
    """The caller's workspace roots."""

    roots: tuple[Root, ...] = ()


InputAnswer: TypeAlias = ElicitationAnswer | SamplingAnswer | RootsAnswer


@dataclass(frozen=True, slots=True)
class InputAsk:
    """A tool's round of questions: its requests by key, and the state it sealed for the
    call that brings the answers (``None`` when it asked nothing it could go on from)."""

    requests: Mapping[str, InputRequest]
    state: str | None = None

    @property
    def kinds(self) -> frozenset[InputKind]:
        return frozenset(request.kind for request in self.requests.values())

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {
            "requests": {key: request_to_json(r) for key, r in self.requests.items()}
        }
        if self.state is not None:
            shown["state"] = self.state
        return shown

    @classmethod
    def from_json(cls, data: Any) -> InputAsk:
        """Read an ask; :class:`~toolbus.domain.errors.WireError` saying what is wrong."""
        if not isinstance(data, Mapping):
            raise WireError(f"'input' must be an object, got {type(data).__name__}")
        requests = data.get("requests") or {}
        state = data.get("state")
        if not isinstance(requests, Mapping) or not all(isinstance(k, str) for k in requests):
            raise WireError("'input.requests' must be an object of requests by key")
        if state is not None and not isinstance(state, str):
            raise WireError("'input.state' must be a string")
        return cls({key: request_from_json(value) for key, value in requests.items()}, state)


@dataclass(frozen=True, slots=True)
class InputReply:
    """A caller's answers to a round, by key, as JSON (:func:`answer_to_json`), and the
    state the tool sealed, given back exactly as it came."""

    responses: Mapping[str, Any] = field(default_factory=dict)
    state: str | None = None

    def to_json(self) -> dict[str, Any]:
        shown: dict[str, Any] = {"responses": dict(self.responses)}
        if self.state is not None:
            shown["state"] = self.state
        return shown

    @classmethod
    def from_json(cls, data: Any) -> InputReply:
        """Read a reply; :class:`~toolbus.domain.errors.WireError` saying what is wrong."""
        if not isinstance(data, Mapping):
            raise WireError(f"'input' must be an object, got {type(data).__name__}")
        responses = data.get("responses") or {}
        state = data.get("state")
        if not isinstance(responses, Mapping) or not all(isinstance(k, str) for k in responses):
            raise WireError("'input.responses' must be an object of answers by key")
        if state is not None and not isinstance(state, str):
            raise WireError("'input.state' must be a string")
        return cls(dict(responses), state)

    @classmethod
    def of(cls, answers: Mapping[str, InputAnswer], state: str | None = None) -> InputReply:
        """A reply giving ``answers``."""
        return cls({key: answer_to_json(answer) for key, answer in answers.items()}, state)


# ------------------------------------------------------------------ errors


class InputRequired(ToolCallError):
    """The tool asks its caller for input before it answers (docs/tool-services.md).

    :attr:`ask` holds the requests by key, and the state to give back with the
    answers. A caller that can answer calls again with them; any other reads
    the message, which says what was asked and that this caller cannot answer.
    """

    error_type = "input-required"

    def __init__(self, message: str, ask: InputAsk | None = None) -> None:
        super().__init__(message)
        self.ask = ask if ask is not None else InputAsk({})


class InputUnavailable(ToolCallError):
    """The tool asked for input of a kind its caller cannot give (a person's answer from
    a caller with no person, say). :attr:`ask` holds what it asked (no state: there is
    nothing to go on from), :attr:`kinds` the kinds the caller lacks."""

    error_type = "input-unavailable"

    def __init__(self, message: str, ask: InputAsk | None = None) -> None:
        super().__init__(message)
        self.ask = ask if ask is not None else InputAsk({})

    @property
    def kinds(self) -> frozenset[InputKind]:
        return self.ask.kinds


class InvalidInputState(BadRequest):
    """A call brought back a tool's input state that does not open: altered, made for
    another call (other arguments, another user, another service), expired, or sealed
    with a key this service does not have."""

    error_type = "invalid-input-state"


def input_error(error_type: str, message: str, ask: InputAsk | None) -> ToolCallError:
    """The exception a caller raises for an answer of ``error_type``, with the ``input``
    it carried (the requests asked, and their state)."""
    if error_type == InputRequired.error_type:
        return InputRequired(message, ask)
    if error_type == InputUnavailable.error_type:
        return InputUnavailable(message, ask)
    if error_type == InvalidInputState.error_type:
        return InvalidInputState(message)
    return error_for(error_type, message)


# ------------------------------------------------------------------ requests as JSON


def request_to_json(request: InputRequest) -> dict[str, Any]:
    """``request`` as MCP writes it: ``{"method": ..., "params": {...}}``."""
    return {"method": METHODS[request.kind], "params": request.params()}


def request_from_json(data: Any) -> InputRequest:
    """The request MCP's JSON describes; :class:`~toolbus.domain.errors.WireError` if it
    is none toolbus knows, or malformed."""
    if not isinstance(data, Mapping):
        raise WireError(f"an input request must be an object, got {type(data).__name__}")
    method = data.get("method")
    kind = _KIND_OF_METHOD.get(method) if isinstance(method, str) else None
    if kind is None:
        known = ", ".join(METHODS.values())
        raise WireError(f"input request method {str(method)[:60]!r} is not one of {known}")
    params = data.get("params") or {}
    if not isinstance(params, Mapping):
        raise WireError(f"the params of an {method} request must be an object")
    if kind == "roots":
        return RootsRequest()
    if kind == "elicitation":
        message, schema = params.get("message"), params.get("requestedSchema")
        if not isinstance(message, str) or not isinstance(schema, Mapping):
            raise WireError(
                "an elicitation/create request needs a 'message' and a 'requestedSchema'"
            )
        return Elicitation(message, dict(schema))
    return _sampling_from(params)


_SAMPLING_FIELDS = ("messages", "maxTokens", "systemPrompt", "temperature", "stopSequences")


def _sampling_from(params: Mapping[str, Any]) -> Sampling:
    messages, max_tokens = params.get("messages"), params.get("maxTokens")
    if not isinstance(messages, list) or not all(isinstance(m, Mapping) for m in messages):
        raise WireError("a sampling/createMessage request needs 'messages', a list of messages")
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool):
        raise WireError("a sampling/createMessage request needs 'maxTokens', an integer")
    system, temperature = params.get("systemPrompt"), params.get("temperature")
    stops = params.get("stopSequences") or []
    if system is not None and not isinstance(system, str):
        raise WireError("'systemPrompt' of a sampling/createMessage request must be a string")
    if temperature is not None and not isinstance(temperature, int | float):
        raise WireError("'temperature' of a sampling/createMessage request must be a number")
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise WireError("'stopSequences' of a sampling/createMessage request must be strings")
    return Sampling(
        [dict(message) for message in messages],
        max_tokens,
        system,
        None if temperature is None else float(temperature),
        tuple(stops),
        {key: value for key, value in params.items() if key not in _SAMPLING_FIELDS},
    )


def _sampling_message(message: str | Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(message, str):
        return {"role": "user", "content": {"type": "text", "text": message}}
    return dict(message)


# ------------------------------------------------------------------ answers as JSON


def answer_to_json(answer: InputAnswer) -> dict[str, Any]:
    """``answer`` as MCP's client writes the result of its request."""
    if isinstance(answer, ElicitationAnswer):
        shown: dict[str, Any] = {"action": answer.action}
        if answer.action == "accept":
            shown["content"] = dict(answer.content)
        return shown
    if isinstance(answer, SamplingAnswer):
        content = dict(answer.content) if answer.content else {"type": "text", "text": answer.text}
        written: dict[str, Any] = {"role": answer.role, "content": content, "model": answer.model}
        if answer.stop_reason is not None:
            written["stopReason"] = answer.stop_reason
        return written
    return {
        "roots": [
            {"uri": root.uri, **({"name": root.name} if root.name is not None else {})}
            for root in answer.roots
        ]
    }


def answer_from_json(request: InputRequest, data: Any) -> InputAnswer:
    """The answer ``data`` gives to ``request``; :class:`ValueError` saying what is wrong."""
    if not isinstance(data, Mapping):
        raise ValueError(f"an answer must be an object, got {type(data).__name__}")
    if isinstance(request, Elicitation):
        action = data.get("action")
        if action not in ("accept", "decline", "cancel"):
            raise ValueError("an elicitation answer needs 'action': accept, decline or cancel")
        content = data.get("content") or {}
        if not isinstance(content, Mapping):
            raise ValueError("the 'content' of an elicitation answer must be an object")
        if action == "accept":
            content = with_defaults(request.schema, content)
        return ElicitationAnswer(action, dict(content) if action == "accept" else {})
    if isinstance(request, Sampling):
        content = data.get("content")
        given = content if isinstance(content, list) else [content]
        blocks: list[Mapping[str, Any]] = [b for b in given if isinstance(b, Mapping)]
        if not blocks or len(blocks) != len(given):
            raise ValueError("a sampling answer needs 'content', a content block")
        text = "".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
        stop = data.get("stopReason")
        return SamplingAnswer(
            text,
            str(data.get("model") or ""),
            stop if isinstance(stop, str) else None,
            str(data.get("role") or "assistant"),
            dict(blocks[0]) if len(blocks) == 1 else {"type": "text", "text": text},
        )
    roots = data.get("roots")
    if not isinstance(roots, list) or not all(
        isinstance(root, Mapping) and isinstance(root.get("uri"), str) for root in roots
    ):
        raise ValueError("a roots answer needs 'roots', a list of {'uri': ...}")
    return RootsAnswer(
        tuple(
            Root(root["uri"], root["name"] if isinstance(root.get("name"), str) else None)
            for root in roots
        )
    )


def with_defaults(schema: Mapping[str, Any], content: Mapping[str, Any]) -> dict[str, Any]:
    """``content`` with the defaults ``schema`` gives for the properties it leaves out."""
    filled = dict(content)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        for name, described in properties.items():
            if name not in filled and isinstance(described, Mapping) and "default" in described:
                filled[name] = described["default"]
    return filled


# ------------------------------------------------------------------ kinds


def kinds_property(kinds: Iterable[str]) -> str:
    """The ``input-kinds`` property naming ``kinds`` (in a fixed order)."""
    wanted = set(kinds)
    return ",".join(kind for kind in INPUT_KINDS if kind in wanted)


def kinds_of(value: str | None) -> frozenset[InputKind]:
    """The kinds an ``input-kinds`` property names (unknown names are ignored)."""
    if not value:
        return frozenset()
    named = {part.strip() for part in value.split(",")}
    return frozenset(kind for kind in INPUT_KINDS if kind in named)


def describe(requests: Mapping[str, InputRequest]) -> str:
    """The requests in a few words, for messages: ``elicitation "Delete a.txt?"``."""
    parts = []
    for request in requests.values():
        if isinstance(request, Elicitation):
            parts.append(f"elicitation {json.dumps(request.message[:80], ensure_ascii=False)}")
        else:
            parts.append(request.kind)
    return ", ".join(parts)
