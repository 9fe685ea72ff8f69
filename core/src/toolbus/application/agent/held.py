"""A session between requests, as plain data: :class:`HeldSession`.

A front door that keeps a caller's session across requests (a gateway
session, an MCP workflow, an agent conversation) keeps it as a
:class:`HeldSession`: who, which groups, the state reached, the transitions
and calls so far (what its audit record will say). Nothing in it is a live
object, so it can be stored anywhere (:meth:`HeldSession.to_json`) and
resumed by any process with the same configuration:
``AgentSession(tools, resume=held)``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from pydantic import TypeAdapter

from toolbus.application.agent.audit import AgentRun, CallRecord, StateTransition


@dataclass(frozen=True, slots=True)
class HeldSession:
    """One session's identity, state and record so far; see the module docs."""

    request_id: str
    user: str
    #: As requested: ``None`` (absent, meaning ``default``) and ``()`` differ.
    requested_groups: tuple[str, ...] | None
    #: As granted by the permissions when the session opened.
    groups: tuple[str, ...]
    initial_state: str
    state: str
    #: Unix seconds.
    started_at: float
    transitions: tuple[StateTransition, ...] = ()
    calls: tuple[CallRecord, ...] = ()
    agent: AgentRun | None = None

    def restarted(self, request_id: str, started_at: float) -> HeldSession:
        """The same caller and state in a fresh record (after the old one was written)."""
        return replace(
            self,
            request_id=request_id,
            initial_state=self.state,
            started_at=started_at,
            transitions=(),
            calls=(),
            agent=None,
        )

    def to_json(self) -> bytes:
        """The session as JSON, for a store."""
        return _ADAPTER.dump_json(self, by_alias=True)

    @classmethod
    def from_json(cls, data: bytes | str) -> HeldSession:
        return _ADAPTER.validate_json(data)

    def to_dict(self) -> dict[str, Any]:
        held: dict[str, Any] = _ADAPTER.dump_python(self, mode="json", by_alias=True)
        return held


_ADAPTER: TypeAdapter[HeldSession] = TypeAdapter(HeldSession)
