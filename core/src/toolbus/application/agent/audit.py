"""Audit records of agent sessions, and the sinks that keep them.

Every agent session produces exactly one :class:`AuditRecord` (docs/audit-and-metrics.md),
written when the session closes, or at once when access is denied. A record
names tools, groups, states and error *types*; it never holds argument values,
observations, error messages, or config values, any of which may carry
secrets or personal data.

Sinks are anything with ``emit(record)``. The default,
:class:`LoggingAuditSink`, writes one JSON line per session to the
``toolbus.audit`` logger at INFO; route that logger wherever audit logs belong.
:class:`ListAuditSink` keeps records in memory, for tests.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import AliasChoices, BaseModel, ConfigDict, Field

AUDIT_LOGGER = "toolbus.audit"

SessionOutcome = Literal["completed", "failed", "cancelled", "denied"]
CallStatus = Literal["ok", "error", "refused", "failed", "cancelled"]
#: Why a call was refused: not offered in this state, outside the session's groups,
#: no such tool, a code hook's ``Deny``, the call policy (its arguments), no person
#: approved it (denied, or its time ran out), a rate limit, or a spent budget.
#: Callers are told ``unknown`` for ``group``.
Refusal = Literal["state", "group", "unknown", "hook", "policy", "approval", "limit", "budget"]
#: Whether a cached answer stood in for the call (``hit``), or it was made and its
#: answer kept (``miss``).
CacheLookup = Literal["hit", "miss"]


def timestamp(seconds: float) -> datetime:
    """A Unix time from an injected clock as an aware UTC datetime (JSON: ``...Z``)."""
    return datetime.fromtimestamp(seconds, tz=UTC)


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="forbid")


class StateTransition(_Model):
    """A state change after a successful call: ``{"tool", "from", "to", "timestamp"}``."""

    tool: str
    # Serialized as the specification spells them; read back under either name.
    from_state: str = Field(
        serialization_alias="from", validation_alias=AliasChoices("from", "from_state")
    )
    to_state: str = Field(serialization_alias="to", validation_alias=AliasChoices("to", "to_state"))
    timestamp: datetime


class ApprovalNote(_Model):
    """The approval a call waited for: who decided, how, and how long it waited.

    ``status``: ``approved`` (the call was made), ``denied``, ``expired`` or
    ``withdrawn`` (it was not); ``decided_by`` is the approver (none when it expired), as the
    door that took the decision authenticated them ``decided_via``.
    """

    id: str
    status: Literal["approved", "denied", "expired", "withdrawn"]
    decided_by: str | None = None
    decided_via: str | None = None
    team: str | None = None
    waited_seconds: float = 0.0


class CallRecord(_Model):
    """One call a session was asked to make: what, when, how it ended. No arguments.

    ``status``: ``ok``; ``error`` (the tool answered with an error, or the
    arguments were unusable); ``refused`` (not offered now, no call made;
    ``refusal`` says why); ``failed`` (the bus failed, the exception reached the
    caller); ``cancelled``.
    """

    tool: str
    tool_call_id: str | None = None
    status: CallStatus
    refusal: Refusal | None = None
    error_type: str | None = None
    state: str
    timestamp: datetime
    duration_seconds: float = 0.0
    #: Argument keys the tool's options set: names only, never values.
    defaulted_arguments: list[str] = []
    fixed_arguments: list[str] = []
    env_arguments: list[str] = []
    #: "suspend" or "terminate", for calls that ran.
    after_execution: str | None = None
    #: The approval the call waited for, if it needed one.
    approval: ApprovalNote | None = None
    #: The policy that forbade the call (``refusal`` ``policy``), when it is named.
    policy: str | None = None
    #: The limit or budget that refused the call (``refusal`` ``limit`` or ``budget``).
    limit: str | None = None
    #: What the call cost, when a price is configured for its tool (``[costs]``).
    cost: float | None = None
    #: For a tool whose answers are cached: ``hit`` (the cache answered, no call was
    #: made) or ``miss`` (the call was made).
    cache: CacheLookup | None = None


class AccessDenial(_Model):
    """Why a session request was refused before anything ran.

    ``denied_groups`` are the groups beyond the user's permissions (``wildcard``:
    ``"*"`` among them); ``state`` is set instead when the request asked to start
    in a state that is not an entry state.
    """

    denied_groups: list[str]
    wildcard: bool
    state: str | None = None


class AgentRun(_Model):
    """What the agent loop did for a session: the model, its turns and the tokens used,
    what they cost (when the model has a price in ``[costs]``), and the budget that
    refused its next turn, if one did."""

    model: str
    iterations: int
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float | None = None
    limit: str | None = None


class AuditRecord(_Model):
    """The audit record of one agent session (one agent request).

    ``requested_groups`` is the request as sent: ``null`` when it named no
    groups (which means ``["default"]``), ``[]`` when it asked for none.
    ``granted_groups`` are the groups the session filtered with; ``allowed_groups``
    what the permissions allow the user (``["*"]`` with access control off).
    Tool lists name the tools as configured and describe the initial state.
    """

    event: Literal["agent-session"] = "agent-session"
    request_id: str
    user: str
    requested_groups: list[str] | None
    granted_groups: list[str]
    allowed_groups: list[str]
    initial_state: str
    final_state: str
    available_tools: list[str]
    filtered_by_group: list[str]
    filtered_by_state: list[str]
    state_transitions: list[StateTransition]
    calls: list[CallRecord]
    access_denied: AccessDenial | None = None
    #: Set when an agent loop ran the session (absent for sessions driven by hand).
    agent: AgentRun | None = None
    #: What the session cost: its calls' and its model turns' costs added up (``None``
    #: when nothing it did has a price).
    cost: float | None = None
    outcome: SessionOutcome
    error: str | None = None
    started_at: datetime
    duration_seconds: float

    def to_json(self) -> str:
        """The record as one line of JSON (``from``/``to`` in transitions)."""
        return self.model_dump_json(by_alias=True)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready Python data (``from``/``to`` in transitions)."""
        return self.model_dump(mode="json", by_alias=True)


class RefusedRecordAudit(_Model):
    """A record in a shared state store that a door refused: it did not open with the
    door's seal keys (forged, altered, moved, or sealed with a key the door lacks).

    ``key`` is the record's key in the store (it names the owner of a held session);
    the record's content is never in the audit.
    """

    event: Literal["state-record-refused"] = "state-record-refused"
    namespace: str
    key: str
    reason: str
    at: datetime

    def to_json(self) -> str:
        return self.model_dump_json()

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


#: What an audit sink is given: a session's record, or an event of the door's own.
AuditEntry = AuditRecord | RefusedRecordAudit


@runtime_checkable
class AuditSink(Protocol):
    """Where audit records go. ``emit`` must not block for long: it runs in the agent's task."""

    def emit(self, record: AuditEntry) -> None: ...


class LoggingAuditSink:
    """Writes each record as one JSON line to a logger (default ``toolbus.audit``, INFO).

    The record is also attached as ``extra={"audit": {...}}`` for structured
    log handlers.
    """

    def __init__(
        self, logger: logging.Logger | str = AUDIT_LOGGER, level: int = logging.INFO
    ) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    def emit(self, record: AuditEntry) -> None:
        if self.logger.isEnabledFor(self.level):
            self.logger.log(self.level, record.to_json(), extra={"audit": record.to_dict()})


class ListAuditSink:
    """Keeps records in :attr:`records`, in the order sessions ended, and the door's own
    events in :attr:`events`. For tests."""

    def __init__(self) -> None:
        self.records: list[AuditRecord] = []
        self.events: list[RefusedRecordAudit] = []

    def emit(self, record: AuditEntry) -> None:
        if isinstance(record, AuditRecord):
            self.records.append(record)
        else:
            self.events.append(record)

    def for_user(self, user: str) -> list[AuditRecord]:
        """The records of ``user``'s sessions."""
        return [record for record in self.records if record.user == user]

    def by_request_id(self, request_id: str) -> AuditRecord:
        """The record of one session; ``KeyError`` naming the id if there is none."""
        for record in self.records:
            if record.request_id == request_id:
                return record
        raise KeyError(f"no audit record for request id {request_id!r}")


class JsonLinesAuditSink:
    """Appends each record to a file as one line of JSON (``audit-file`` in ``[doors]``).

    The file is opened once and every line is flushed as it is written, so a
    reader (a log shipper, a test) sees each record as soon as the session ends.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._file = self.path.open("a", encoding="utf-8")

    def emit(self, record: AuditEntry) -> None:
        line = record.to_json() + "\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


class AuditSinks:
    """Hands each record to several sinks, in order; one failing does not stop the rest."""

    def __init__(self, sinks: Iterable[AuditSink]) -> None:
        self.sinks = tuple(sinks)

    def emit(self, record: AuditEntry) -> None:
        failed: Exception | None = None
        for sink in self.sinks:
            try:
                sink.emit(record)
            except Exception as exc:
                failed = exc
        if failed is not None:
            raise failed
