"""What a session's audit record says, gathered as the session runs: :class:`SessionRecorder`.

An :class:`~toolbus.application.agent.session.AgentSession` notes every call
and state change here; when the session ends (or is refused at the door) the
recorder builds the one :class:`~toolbus.application.agent.audit.AuditRecord`
and hands it to the sink. A sink that fails is logged, never raised: by then
the request has run (or been refused), and failing it would hide its result
without undoing anything.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from toolbus.application.agent.audit import (
    AUDIT_LOGGER,
    AccessDenial,
    AgentRun,
    ApprovalNote,
    AuditRecord,
    AuditSink,
    CacheLookup,
    CallRecord,
    CallStatus,
    Refusal,
    SessionOutcome,
    StateTransition,
    timestamp,
)
from toolbus.application.calls.client import CallResult
from toolbus.domain.calls.arguments import AppliedOptions
from toolbus.domain.config.registry import WILDCARD, Availability
from toolbus.domain.errors import AccessDenied

_audit_log = logging.getLogger(AUDIT_LOGGER)
_NOTHING_MORE: dict[str, object] = {}


class SessionRecorder:
    """The calls, transitions and agent run of one session, and its audit record."""

    def __init__(
        self,
        *,
        request_id: str,
        user: str,
        requested_groups: tuple[str, ...] | None,
        initial_state: str,
        started_at: float,
        sink: AuditSink,
        timer: Callable[[], float],
        calls: Iterable[CallRecord] = (),
        transitions: Iterable[StateTransition] = (),
        agent: AgentRun | None = None,
    ) -> None:
        self.request_id = request_id
        self.user = user
        self.requested_groups = requested_groups
        self.initial_state = initial_state
        self.started_at = started_at
        self._sink = sink
        self._timer = timer
        self._started = timer()
        self.calls: list[CallRecord] = list(calls)
        self.transitions: list[StateTransition] = list(transitions)
        self.agent = agent

    def call(
        self,
        tool: str,
        tool_call_id: str | None,
        status: CallStatus,
        state: str,
        at: float,
        seconds: float,
        error_type: str | None,
        refusal: Refusal | None = None,
        *,
        invocation: CallResult | None = None,
        applied: AppliedOptions | None = None,
        approval: ApprovalNote | None = None,
        policy: str | None = None,
        limit: str | None = None,
        cost: float | None = None,
        cache: CacheLookup | None = None,
    ) -> None:
        """Note one call the session was asked to make (no arguments, ever)."""
        if invocation is not None:
            applied = invocation.applied
        # What most calls lack is left to its default: pydantic fills a default faster
        # than it checks a None it is given.
        given = (
            _NOTHING_MORE
            if limit is None and cost is None and cache is None
            else {"limit": limit, "cost": cost, "cache": cache}
        )
        # Validated: pydantic checks these few typed values in Rust faster than
        # model_construct copies them in Python.
        self.calls.append(
            CallRecord(
                tool=tool,
                tool_call_id=tool_call_id,
                status=status,
                refusal=refusal,
                error_type=error_type,
                state=state,
                timestamp=timestamp(at),
                duration_seconds=seconds,
                defaulted_arguments=list(applied.defaulted) if applied else [],
                fixed_arguments=list(applied.fixed) if applied else [],
                env_arguments=list(applied.env) if applied else [],
                after_execution=invocation.after_execution if invocation else None,
                approval=approval,
                policy=policy,
                **given,
            )
        )

    def cost(self) -> float | None:
        """What the session's calls and model turns cost so far; ``None``: nothing priced."""
        costs = [call.cost for call in self.calls if call.cost is not None]
        if self.agent is not None and self.agent.cost is not None:
            costs.append(self.agent.cost)
        return sum(costs) if costs else None

    def completed(
        self,
        outcome: SessionOutcome,
        error: str | None,
        *,
        granted: Iterable[str],
        allowed: Iterable[str],
        final_state: str,
        initial: Availability,
    ) -> AuditRecord:
        """The session ended: its record, the tools it started with included."""
        return self.emit(
            outcome=outcome,
            error=error,
            granted=list(granted),
            allowed=list(allowed),
            final_state=final_state,
            available=[tool.name for tool in initial.available],
            by_group=list(initial.filtered_by_group),
            by_state=list(initial.filtered_by_state),
        )

    def denied(
        self, exc: AccessDenied, *, allowed: Iterable[str], state: str | None
    ) -> AuditRecord:
        """The session was refused before anything ran: its groups, or ``state``."""
        if state is not None:
            self.initial_state = state
        return self.emit(
            outcome="denied",
            error=None,
            granted=[],
            allowed=list(allowed),
            final_state=self.initial_state,
            available=[],
            by_group=[],
            by_state=[],
            denial=AccessDenial(
                denied_groups=list(exc.denied), wildcard=WILDCARD in exc.denied, state=state
            ),
        )

    def emit(
        self,
        *,
        outcome: SessionOutcome,
        error: str | None,
        granted: list[str],
        allowed: list[str],
        final_state: str,
        available: list[str],
        by_group: list[str],
        by_state: list[str],
        denial: AccessDenial | None = None,
    ) -> AuditRecord:
        """Build the audit record and hand it to the sink."""
        record = AuditRecord(
            request_id=self.request_id,
            user=self.user,
            requested_groups=None if self.requested_groups is None else list(self.requested_groups),
            granted_groups=granted,
            allowed_groups=allowed,
            initial_state=self.initial_state,
            final_state=final_state,
            available_tools=available,
            filtered_by_group=by_group,
            filtered_by_state=by_state,
            state_transitions=list(self.transitions),
            calls=list(self.calls),
            access_denied=denial,
            agent=self.agent,
            cost=self.cost(),
            outcome=outcome,
            error=error,
            started_at=timestamp(self.started_at),
            duration_seconds=self._timer() - self._started,
        )
        try:
            self._sink.emit(record)
        except Exception:
            # The request has run (or been refused) already; failing it now would
            # hide its result without undoing anything. Make the loss loud instead.
            _audit_log.exception(
                "could not write the audit record of agent session %s", self.request_id
            )
        return record
