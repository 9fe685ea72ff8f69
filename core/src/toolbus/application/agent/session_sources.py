"""Where an agent loop gets each request's session, and hands it back when it ends.

A front door's sources (``toolbus.application.doors.conversations``) open
sessions through the door and continue a conversation an earlier request
ended in; :class:`PlainSessions` opens them straight from a tools facade and
holds nothing.
"""

from __future__ import annotations

from typing import Protocol

from toolbus.application.agent.audit import AuditSink
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.access.permissions import Permissions
from toolbus.domain.agent.wire import AgentRequest
from toolbus.domain.errors import SessionNotFound


class Sessions(Protocol):
    """Where an agent loop gets each request's session, and hands it back when it ends."""

    async def open(self, request: AgentRequest, request_id: str) -> AgentSession:
        """The request's session; raises ``AccessDenied`` (``StateRefused``),
        ``LimitReached`` or ``SessionNotFound`` to refuse it."""
        ...

    async def keep(self, request: AgentRequest, session: AgentSession) -> str | None:
        """The request is about to end where ``session`` stands: hold what a later
        request may continue from, and return the id to name then (or ``None``)."""
        ...

    async def resume(self, request: AgentRequest, held: HeldSession) -> AgentSession:
        """The session of a request another replica began, from its checkpoint
        (:mod:`~toolbus.application.agent.checkpoints`); groups are checked again."""
        ...


class PlainSessions:
    """Sessions straight from a tools facade, with the given parts; nothing is held."""

    def __init__(
        self,
        tools: Tools,
        *,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        permissions: Permissions | None = None,
        code_hooks: CompiledHooks | None = None,
        timeout: float | None = None,
        default_user: str = "anonymous",
    ) -> None:
        self.tools = tools
        self.audit = audit
        self.metrics = metrics
        self.permissions = permissions
        self.code_hooks = code_hooks
        self.timeout = timeout
        self.default_user = default_user

    async def open(self, request: AgentRequest, request_id: str) -> AgentSession:
        if request.session:
            raise SessionNotFound(request.session, "This agent holds no sessions")
        return AgentSession(
            self.tools,
            user=request.user or self.default_user,
            groups=request.group,
            state=request.state,
            request_id=request_id,
            permissions=self.permissions,
            audit=self.audit,
            metrics=self.metrics,
            code_hooks=self.code_hooks,
            timeout=self.timeout,
        )

    async def keep(self, request: AgentRequest, session: AgentSession) -> str | None:
        return None

    async def resume(self, request: AgentRequest, held: HeldSession) -> AgentSession:
        return AgentSession(
            self.tools,
            resume=held,
            permissions=self.permissions,
            audit=self.audit,
            metrics=self.metrics,
            code_hooks=self.code_hooks,
            timeout=self.timeout,
        )
