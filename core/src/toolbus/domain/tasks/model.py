"""A call that cannot answer at once, as data: :class:`Task`.

A call that waits (for a person's approval, or because its tool takes long)
becomes a task: an id its caller keeps, a status, and in the end a result or an
error, kept until the task's time to live runs out. Every front door shows the
same task in its own terms (the gateway's ``/v1/tasks``, MCP's Tasks, A2A's
tasks, an agent run that waits), and any replica of a door answers for it:
the task is plain data in the door's (sealed) state store.

Statuses::

    working ──► input-required ──► working ──► completed | failed | cancelled
       └──────────────────────────────────────► completed | failed | cancelled

``input-required``: the call waits for someone's input: an approval (named by
``approval_id``), or answers its tool asked its caller for (``input_requests``,
by key, as MCP writes them; answered with :meth:`Task.answered`); a *suspended*
task waits so with nobody running it until it is woken (an agent run:
:meth:`Task.suspended`). ``completed``, ``failed`` and ``cancelled`` are final:
a final task never moves again. Only its owner (and operators) may read or
cancel it.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from toolbus.domain.errors import TaskClosed

TaskStatus = Literal["working", "input-required", "completed", "failed", "cancelled"]
#: Statuses a task never leaves.
FINAL: frozenset[str] = frozenset({"completed", "failed", "cancelled"})
#: Seconds a task is kept after it ended, unless the door says otherwise.
DEFAULT_TTL = 3600.0


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class TaskError(_Model):
    """Why a task failed: a wire error type and a message for its caller (no secrets)."""

    type: str
    message: str


class TaskCall(_Model):
    """What any replica needs to make the task's call again, or go on with it: the
    session it belongs to (groups, state) and the call itself. Kept sealed, and
    dropped once the task is final."""

    groups: tuple[str, ...]
    state: str
    request_id: str
    tool_call_id: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    #: The id of the held session the call was made in (a gateway session), if any.
    session: str | None = None
    #: The bus call's id once it was sent: a replica going on with the task waits for
    #: (or sends again) this call, never a new one.
    call_id: str | None = None
    #: The approval the call was approved under, once approved: a replica going on with
    #: the task sends the call again under it (its approval was spent on this very call)
    #: rather than asking anew.
    approval_id: str | None = None
    #: What the caller can answer a tool that asks (``elicitation``, ``sampling``, ``roots``).
    input_kinds: tuple[str, ...] = ()
    #: The answers given to what the tool asked, by key (MCP's JSON), and the state the
    #: tool sealed with its last questions: the call goes on with both, on any replica.
    input_responses: dict[str, Any] = Field(default_factory=dict)
    input_state: str | None = None


class Task(_Model):
    """One task; see the module docs. Times are Unix seconds."""

    id: str
    owner: str
    tool: str
    #: The door that took the call (``gateway``, ``mcp``, ``agent``, ``a2a``).
    door: str
    status: TaskStatus = "working"
    #: What the task waits for, in words (``waiting for approval by ops``).
    message: str | None = None
    approval_id: str | None = None
    #: What its tool asks its caller and is not answered yet, by key (MCP's JSON).
    input_requests: dict[str, Any] | None = None
    result: str | None = None
    error: TaskError | None = None
    #: The session's state after the call, when it ended.
    state: str | None = None
    #: Chunks of the answer seen so far (a streamed call's progress).
    progress: int = 0
    created_at: float
    updated_at: float
    #: Seconds the task is kept once it is final.
    ttl: float = DEFAULT_TTL
    call: TaskCall | None = None
    #: The replica running the call, and until when it answers for it (it renews this).
    runner: str | None = None
    runner_until: float = 0.0

    @property
    def final(self) -> bool:
        return self.status in FINAL

    def moved(self, now: float, status: TaskStatus, **fields: Any) -> Task:
        """This task in ``status`` at ``now``; :class:`TaskClosed` if it is final already.

        A final task drops its call (what it needed to run) and its runner.
        """
        if self.final:
            raise TaskClosed(self.id, self.status)
        update: dict[str, Any] = {"status": status, "updated_at": now, **fields}
        if status in FINAL:
            update.update(call=None, runner=None, runner_until=0.0)
        if status != "input-required":
            update.setdefault("approval_id", None)
            update.setdefault("message", None)
            update.setdefault("input_requests", None)
        return self.model_copy(update=update)

    def answered(self, now: float, responses: dict[str, Any]) -> Task:
        """This task with ``responses`` to what its tool asks (keys it does not ask are
        ignored); what is answered leaves :attr:`input_requests`. :class:`TaskClosed` if
        it is final."""
        if self.final:
            raise TaskClosed(self.id, self.status)
        pending = self.input_requests or {}
        given = {key: value for key, value in responses.items() if key in pending}
        if not given or self.call is None:
            return self
        call = self.call.model_copy(
            update={"input_responses": {**self.call.input_responses, **given}}
        )
        left = {key: value for key, value in pending.items() if key not in given}
        return self.model_copy(update={"call": call, "input_requests": left, "updated_at": now})

    def run_by(self, runner: str, until: float) -> Task:
        """This task answered for by ``runner`` until ``until``."""
        return self.model_copy(update={"runner": runner, "runner_until": until})

    def orphaned(self, now: float) -> bool:
        """Whether nobody runs it any more: not final, and its runner stopped renewing."""
        return not self.final and self.runner_until < now

    def suspended(self, now: float) -> bool:
        """Whether it waits with nobody running it (an agent run that waits for a person):
        not final, no runner, and not to be taken over before ``runner_until``."""
        return not self.final and self.runner is None and self.runner_until >= now

    def suspend(self, now: float, until: float, message: str, approval_id: str | None) -> Task:
        """This task waiting for someone (``input-required``) with nobody running it, until
        ``until`` at the latest (then a replica goes on with it); :class:`TaskClosed` if it
        is final already."""
        waiting = self.moved(now, "input-required", message=message, approval_id=approval_id)
        return waiting.model_copy(update={"runner": None, "runner_until": until})

    def expires_at(self, now: float) -> float:
        """When the store may drop it: ``ttl`` after it ended (a running task is kept while
        its runner renews it, and ``ttl`` beyond)."""
        end = self.updated_at if self.final else max(now, self.runner_until)
        return end + self.ttl

    def view(self) -> dict[str, Any]:
        """What its owner is shown: everything but the call it holds and its runner."""
        return self.model_dump(mode="json", exclude={"call", "runner", "runner_until"})

    def to_json(self) -> bytes:
        return self.model_dump_json().encode()

    @classmethod
    def from_json(cls, data: bytes | str) -> Task:
        return cls.model_validate_json(data)
