"""Agent runs that outlive their replica: a :class:`Checkpoint` per step, in a state store.

An :class:`~toolbus.application.agent.loop.AgentLoop` given
:class:`RunCheckpoints` writes where each request stands, under its request
id, in the namespace ``agent-runs``:

* after each model turn: the chat so far (the turn's assistant message
  included) and the tool calls the turn asked for (``pending``);
* after each of those calls: its outcome (``answered``);
* once the turn's calls are all answered: the chat with their observations,
  and nothing pending.

Each time with the session as plain data (state, calls, transitions: what its
audit record will say), the iterations and the tokens used. A request whose
replica died is delivered again (the agent's request queue must be
``persistent://``) to another replica, which reads the checkpoint and goes on
from it: the model turns and the tool calls already answered are not made
again, and a call that was in flight is sent again under the same call id
(:func:`run_call_id`), which a persistent tool queue answers from memory.
The checkpoint is removed when the request ends.

A checkpoint also holds the request itself (without the chat it began with,
which its messages hold) and, once the run suspended while a call waits for a
person (:mod:`~toolbus.application.agent.suspension`), the task it became: a
run that goes on after its suspension has no delivery of its request to go on
from.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import TypeAdapter

from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.domain.agent.turns import ToolCall, Usage
from toolbus.domain.agent.wire import AgentRequest
from toolbus.ports import StateStore

#: The state store namespace of agent runs' checkpoints.
NAMESPACE = "agent-runs"
#: Seconds a checkpoint outlives its last write, when the loop gives no time limit.
DEFAULT_TTL = 3600.0

_RUN_CALLS = uuid.UUID("5b8f4d0e-3a52-4f0e-9c77-6d1f2a4e9b10")


def run_call_id(request_id: str, iteration: int, tool_call_id: str) -> str:
    """The bus call id of one tool call of one run: the same on every replica, so that a
    call sent again after a hand-over is the same call to the service."""
    return str(uuid.uuid5(_RUN_CALLS, f"{request_id}\x1f{iteration}\x1f{tool_call_id}"))


@dataclass(slots=True)
class Checkpoint:
    """Where one agent request stands; see the module docs."""

    request_id: str
    session: HeldSession
    #: The chat as the model will be sent it next (OpenAI messages).
    messages: list[dict[str, Any]]
    #: Model turns made.
    iterations: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: The tool calls of the last turn, while some are unanswered: ``id``, ``name``,
    #: ``arguments`` (as the model wrote them).
    pending: list[dict[str, str]] | None = None
    #: Outcomes of pending calls, by tool call id.
    answered: dict[str, CallOutcome] = field(default_factory=dict)
    #: The request, without the chat it began with (``messages`` holds it).
    request: AgentRequest | None = None
    #: The task the run became when it first suspended, if it did.
    task: str | None = None

    def to_json(self) -> bytes:
        return _ADAPTER.dump_json(self)

    @classmethod
    def from_json(cls, data: bytes) -> Checkpoint:
        return _ADAPTER.validate_json(data)


_ADAPTER: TypeAdapter[Checkpoint] = TypeAdapter(Checkpoint)


def kept_request(request: AgentRequest) -> AgentRequest:
    """``request`` as a checkpoint keeps it: without the chat it began with."""
    if request.messages is None and not request.history:
        return request
    return request.model_copy(update={"messages": None, "history": []})


def checkpoint(
    request_id: str,
    session: HeldSession,
    messages: list[dict[str, Any]],
    iterations: int,
    usage: Usage,
    pending: Sequence[ToolCall] | None = None,
    answered: dict[str, CallOutcome] | None = None,
    *,
    request: AgentRequest | None = None,
    task: str | None = None,
) -> Checkpoint:
    """Where a run stands: ``pending`` the calls of the turn being answered, ``answered``
    the outcomes of those answered so far; ``request`` kept without its chat."""
    return Checkpoint(
        request_id,
        session,
        list(messages),
        iterations,
        usage.input_tokens,
        usage.output_tokens,
        None
        if pending is None
        else [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in pending],
        dict(answered or {}),
        None if request is None else kept_request(request),
        task,
    )


class RunCheckpoints:
    """Checkpoints of agent runs in a state store every agent replica shares.

    ``ttl``: seconds a checkpoint lives after its last write (a run no replica
    picks up again is forgotten then); the loop passes its time limit.
    """

    def __init__(
        self, store: StateStore, *, ttl: float = DEFAULT_TTL, namespace: str = NAMESPACE
    ) -> None:
        self.store = store
        self.ttl = ttl
        self.namespace = namespace

    async def load(self, request_id: str) -> Checkpoint | None:
        entry = await self.store.get(self.namespace, request_id)
        return None if entry is None else Checkpoint.from_json(entry.value)

    async def save(self, checkpoint: Checkpoint, *, ttl: float | None = None) -> None:
        """Keep ``checkpoint`` for ``ttl`` seconds (default :attr:`ttl`)."""
        await self.store.put(
            self.namespace,
            checkpoint.request_id,
            checkpoint.to_json(),
            ttl=self.ttl if ttl is None else ttl,
        )

    async def finish(self, request_id: str) -> None:
        await self.store.delete(self.namespace, request_id)


class RunProgress:
    """The checkpoints of one request's run, written one at a time (its calls answer
    concurrently), each with everything known when it is written."""

    def __init__(
        self,
        checkpoints: RunCheckpoints,
        request_id: str,
        request: AgentRequest | None = None,
        task: str | None = None,
    ) -> None:
        self.checkpoints = checkpoints
        self.request_id = request_id
        self.request = None if request is None else kept_request(request)
        #: The task the run became, once it suspended.
        self.task = task
        #: The chat up to the turn whose calls are being made (what their checkpoints hold).
        self.chat: list[dict[str, Any]] = []
        self._saving = anyio.Lock()

    async def save(
        self,
        session: HeldSession,
        messages: list[dict[str, Any]],
        iterations: int,
        usage: Usage,
        pending: Sequence[ToolCall] | None = None,
        answered: dict[str, CallOutcome] | None = None,
    ) -> None:
        """Where the run stands: ``pending`` the calls of the turn being answered, and
        ``answered`` the outcomes of those answered so far."""
        async with self._saving:
            await self.checkpoints.save(
                checkpoint(
                    self.request_id,
                    session,
                    messages,
                    iterations,
                    usage,
                    pending,
                    answered,
                    request=self.request,
                    task=self.task,
                )
            )

    @staticmethod
    def pending_calls(saved: Checkpoint) -> list[ToolCall]:
        """The calls of the turn ``saved`` was answering (as far as it got)."""
        return [ToolCall(c["id"], c["name"], c["arguments"]) for c in saved.pending or ()]
