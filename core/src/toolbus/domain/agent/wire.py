"""Agent requests and the events that answer them, as they travel on the bus.

The shapes follow TrustGraph's agent service (``AgentRequest``,
``AgentStep``, ``AgentResponse``) field for field where it has the field;
docs/agent.md lists where toolbus differs and why. Bodies are UTF-8 JSON;
decoders ignore keys they do not know and fill defaults for missing ones. The
request's id travels as the message property ``id``, copied onto every event.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

#: The kinds of event an agent request is answered with.
ChunkType = Literal[
    "thought", "action", "approval", "waiting", "input", "observation", "answer", "error"
]

#: Where agent services read requests and send events, unless told otherwise.
DEFAULT_REQUEST_QUEUE = "non-persistent://tg/request/agent"
DEFAULT_RESPONSE_QUEUE = "non-persistent://tg/response/agent"
#: Where askers send the answers a run asked its user for: every agent replica hears
#: them, and the one running the request takes them.
ANSWERS_QUEUE = "non-persistent://toolbus/agents/answers"


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class AgentStep(_Model):
    """One step of an earlier exchange: what the agent thought, did and saw.

    ``action`` names the tool called (empty for a step that called none);
    ``arguments`` are its arguments.
    """

    thought: str = ""
    action: str = ""
    arguments: dict[str, Any] = Field(default_factory=dict)
    observation: str = ""
    user: str = ""


class AgentRequest(_Model):
    """A question for the agent, with who asks, which tools it may use and where it stands.

    ``group``: ``None`` means ``["default"]``, ``[]`` means no tools. ``state``:
    ``""`` means ``"undefined"``. ``history`` replays earlier steps; ``messages``
    (a toolbus addition) gives an OpenAI-style chat history instead, for callers
    that keep one. ``streaming``: send the answer's text as the model writes it
    (otherwise each message comes whole). ``session`` (a toolbus addition):
    continue the conversation an earlier request's last event named, in the
    state it reached. ``answers`` (a toolbus addition): what the asker answers
    when a tool asks its user (``["elicitation"]``: forms, through ``input``
    events and :class:`AgentAnswers`); absent, tools learn the user cannot be asked.
    """

    question: str = ""
    messages: list[dict[str, Any]] | None = None
    user: str = ""
    group: list[str] | None = None
    state: str = ""
    history: list[AgentStep] = Field(default_factory=list)
    streaming: bool = False
    session: str | None = None
    answers: list[str] | None = None


class EventError(_Model):
    """Why the request failed: a machine-readable ``type`` and a message for people."""

    type: str
    message: str


class EventApproval(_Model):
    """A call waiting for a person's approval: which approval, who may decide, until when.

    ``expires_at`` is Unix seconds; decide it with ``toolbus approvals approve ID``
    (or deny), the gateway's ``/v1/approvals``, or its console.
    """

    id: str
    approvers: list[str] = Field(default_factory=list)
    reason: str = ""
    expires_at: float = 0.0


class EventTask(_Model):
    """The task a run became while it waits for a person: its ``id`` (read it with
    ``toolbus tasks show ID``, or the gateway's ``/v1/tasks/{id}``), its ``status`` and
    what it waits for (``message``: ``waiting for approval by ops``)."""

    id: str
    status: str = "input-required"
    message: str = ""


class EventUsage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0


class AgentEvent(_Model):
    """One event answering an agent request.

    ``chunk_type`` says what ``content`` is. A message may come in several
    chunks; ``end_of_message`` marks its last. The request's last event has
    ``end_of_dialog`` and ``end_of_stream`` set (the same thing, under
    TrustGraph's name and toolbus's), and carries the final ``state``, the
    ``model``, the ``iterations`` made and the token ``usage``, and ``cost``,
    what its model turns and tool calls cost when they have prices; when the
    request ended in a state a new request may not start in, also the
    ``session`` to name to continue from there.

    ``action`` and ``observation`` events name the ``tool``, the model's
    ``tool_call_id`` and (``action`` only) the ``arguments``; ``observation``
    events say how the call came out in ``status``: ``ok``, ``error`` or ``refused``.
    An ``approval`` event says a call waits for a person (``approval``; its
    ``arguments`` as the approvers see them, secrets redacted); its
    observation follows once it is decided. A ``waiting`` event says the run waits for
    those decisions without holding a worker: it became the ``task`` (and ``approval``
    names the first approval it waits for); the run goes on, on whichever agent replica,
    once one is decided, and its next events follow. An ``input`` event says a tool asks
    the user (``input_requests``: the requests by key, as MCP writes them); the run
    waits for an :class:`AgentAnswers` naming the request.
    """

    chunk_type: ChunkType
    content: str = ""
    end_of_message: bool = True
    end_of_dialog: bool = False
    end_of_stream: bool = False
    tool: str | None = None
    arguments: dict[str, Any] | str | None = None
    tool_call_id: str | None = None
    status: str | None = None
    state: str | None = None
    error: EventError | None = None
    model: str | None = None
    iterations: int | None = None
    usage: EventUsage | None = None
    cost: float | None = None
    session: str | None = None
    approval: EventApproval | None = None
    task: EventTask | None = None
    input_requests: dict[str, Any] | None = None

    @property
    def last(self) -> bool:
        """True for the request's final event."""
        return self.end_of_stream or self.end_of_dialog


class AgentAnswers(_Model):
    """The user's answers to what a run's ``input`` event asked: the request's id (the
    ``id`` of its events), the user it runs for, and the answers by key (as MCP's client
    writes them: ``{"action": "accept", "content": {...}}`` for a form)."""

    request_id: str
    user: str = ""
    responses: dict[str, Any] = Field(default_factory=dict)


def encode_answers(answers: AgentAnswers) -> bytes:
    return answers.model_dump_json().encode()


def decode_answers(body: bytes) -> AgentAnswers:
    """The answers in ``body``; :class:`BadAgentRequest` saying what is wrong."""
    try:
        return AgentAnswers.model_validate_json(body)
    except ValidationError as exc:
        raise BadAgentRequest(f"the answers are not valid: {exc.errors()[0]['msg']}") from None


class BadAgentRequest(ValueError):
    """An agent request body that cannot be read; the message says what is wrong."""


def encode_request(request: AgentRequest) -> bytes:
    return request.model_dump_json(exclude_none=True).encode()


def decode_request(body: bytes) -> AgentRequest:
    """The request in ``body``, or :class:`BadAgentRequest` saying what is wrong with it."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadAgentRequest(f"the agent request is not UTF-8 JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadAgentRequest(f"the agent request must be a JSON object, not {type(data).__name__}")
    try:
        request = AgentRequest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'request'}: {error['msg']}"
            for error in exc.errors()
        )
        raise BadAgentRequest(f"the agent request is not valid: {problems}") from None
    if not request.question.strip() and not request.messages:
        raise BadAgentRequest(
            "the agent request has no question: set 'question' (or 'messages' with the chat so far)"
        )
    return request


def encode_event(event: AgentEvent) -> bytes:
    return event.model_dump_json(exclude_none=True).encode()


def decode_event(body: bytes) -> AgentEvent:
    return AgentEvent.model_validate_json(body)
