"""What the A2A door keeps beside its tasks: :class:`A2ARecords`.

A task's status, result and owner are toolbus's task
(:class:`~toolbus.domain.tasks.Task`, in the door's :class:`~toolbus.application.tasks.TaskBook`);
A2A adds two things the task model has no field for, kept in the same store
(namespace ``a2a``, sealed like the rest of the door's state):

* per task, its ``contextId``, the agent it was sent to, and its history (A2A's
  ``history``): the message the caller sent, then the agent's steps (thoughts,
  calls, what they answered, approvals waited for) as they happen;
* per conversation (a caller's ``contextId``), the chat so far, so that the next
  message in the same context continues it, and the agent's held session when a
  run ended in a state a new request may not start in.

Contexts are keyed by owner and id: one caller's ``contextId`` never names
another's conversation, so a client-chosen id can neither collide with nor
reveal someone else's.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from toolbus._internal.stored_json import change_json
from toolbus.domain.tasks import DEFAULT_TTL
from toolbus.ports import StateStore

NAMESPACE = "a2a"
#: Chat messages a context keeps at most (the oldest go first).
KEPT_MESSAGES = 40
#: Messages a task's history keeps at most: the caller's, and the agent's latest steps.
KEPT_HISTORY = 100
#: Characters of a step's text the history keeps (its event carried all of it).
KEPT_TEXT = 4000


def _cut(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with each text part cut to :data:`KEPT_TEXT` characters."""
    parts = []
    for part in message.get("parts", []):
        text = part.get("text") if isinstance(part, dict) else None
        if isinstance(text, str) and len(text) > KEPT_TEXT:
            more = len(text) - KEPT_TEXT
            part = {**part, "text": f"{text[:KEPT_TEXT]}… ({more} characters more)"}
        parts.append(part)
    return {**message, "parts": parts}


class TaskRecord(BaseModel):
    """What A2A knows of a task beyond toolbus's task."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    task_id: str
    context_id: str
    agent: str
    #: The bus request the task's run is (its events carry this id).
    request_id: str
    #: The caller's message, then the agent's steps, as A2A JSON (``Message``).
    history: list[dict[str, Any]] = Field(default_factory=list)


class ContextRecord(BaseModel):
    """A caller's conversation with one agent, continued by each message in its context."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    context_id: str
    owner: str
    agent: str
    #: The chat so far, OpenAI-style (``{"role", "content"}``), newest last.
    messages: list[dict[str, str]] = Field(default_factory=list)
    #: The agent's held session, when the last run ended in a state it holds.
    session: str | None = None

    def answered(self, question: str, answer: str | None, session: str | None) -> ContextRecord:
        """This context after a run that asked ``question`` and got ``answer``."""
        chat = [*self.messages, {"role": "user", "content": question}]
        if answer:
            chat.append({"role": "assistant", "content": answer})
        return self.model_copy(update={"messages": chat[-KEPT_MESSAGES:], "session": session})


def _task_key(task_id: str) -> str:
    return f"task/{task_id}"


def _context_key(owner: str, context_id: str) -> str:
    # The owner's length first: one-to-one, whatever either holds.
    return f"context/{len(owner)}:{owner}/{context_id}"


class A2ARecords:
    """The door's A2A records in ``store``; ``ttl``: seconds each is kept after a write."""

    def __init__(self, store: StateStore, *, ttl: float = DEFAULT_TTL) -> None:
        self.store = store
        self.ttl = ttl

    async def task(self, task_id: str) -> TaskRecord | None:
        entry = await self.store.get(NAMESPACE, _task_key(task_id))
        if entry is None:
            return None
        try:
            return TaskRecord.model_validate_json(entry.value)
        except ValueError:
            return None

    async def keep_task(self, record: TaskRecord, *, ttl: float) -> None:
        """Keep ``record`` for ``ttl`` seconds (a task's record lives as long as its task)."""
        await self.store.put(
            NAMESPACE, _task_key(record.task_id), record.model_dump_json().encode(), ttl=ttl
        )

    async def said(self, task_id: str, message: dict[str, Any], *, ttl: float) -> None:
        """Add the agent's ``message`` (A2A JSON) to the task's history, kept ``ttl``
        seconds from now; its text cut to :data:`KEPT_TEXT` characters."""

        def change(current: Any) -> Any:
            if not current:
                return None  # gone (expired): nothing to add to
            try:
                record = TaskRecord.model_validate(current)
            except ValueError:
                return None
            history = [*record.history, _cut(message)]
            if len(history) > KEPT_HISTORY:  # the caller's message stays first
                history = [history[0], *history[len(history) - KEPT_HISTORY + 1 :]]
            return record.model_copy(update={"history": history}).model_dump(mode="json")

        await change_json(self.store, NAMESPACE, _task_key(task_id), change, default=None, ttl=ttl)

    async def context(self, owner: str, context_id: str, agent: str) -> ContextRecord:
        """``owner``'s context ``context_id`` with ``agent``; a fresh one when there is none
        (or it was kept for another agent: a context is one conversation with one agent)."""
        entry = await self.store.get(NAMESPACE, _context_key(owner, context_id))
        fresh = ContextRecord(context_id=context_id, owner=owner, agent=agent)
        if entry is None:
            return fresh
        try:
            found = ContextRecord.model_validate_json(entry.value)
        except ValueError:
            return fresh
        return found if found.owner == owner and found.agent == agent else fresh

    async def answered(
        self, context: ContextRecord, question: str, answer: str | None, session: str | None
    ) -> None:
        """Add a run's question and answer to its context (with replicas writing at once,
        each run's pair is added once)."""

        def change(current: Any) -> Any:
            try:
                kept = ContextRecord.model_validate(current) if current else context
            except ValueError:
                kept = context
            if kept.owner != context.owner or kept.agent != context.agent:
                kept = context
            return kept.answered(question, answer, session).model_dump(mode="json")

        await change_json(
            self.store,
            NAMESPACE,
            _context_key(context.owner, context.context_id),
            change,
            default=None,
            ttl=self.ttl,
        )
