"""Bus tools as an MCP server: ``toolbus mcp serve``.

:class:`BusMcpServer` is an MCP server (the SDK's low-level ``Server``) whose
tools are what an :class:`~toolbus.application.agent.session.AgentSession` would
offer its caller: the caller's user, groups and state, checked against the
configuration's ``permissions``. A ``tools/call`` goes over the bus through
that session, so argument options, code hooks, deadlines, trace context,
audit records and metrics all apply, and a successful call moves the state.

Each MCP client has a :class:`Workflow` of its own: its user and groups, its
state, and the agent session it calls through. Over stdio the process serves
one client, so there is one workflow. Over HTTP the bearer token names the
user; clients of the 2025 protocol revisions have a session (``Mcp-Session-Id``)
and get a workflow each; the 2026-07-28 revision has no session, so a client
names its workflow in each request's ``_meta`` (:data:`WORKFLOW_META_KEY`),
and requests that name none share their user's default workflow.

Tracing: a ``tools/call`` continues the trace whose context the client sent
in the request's ``_meta`` (``traceparent``, ``tracestate``), as MCP's
OpenTelemetry conventions say; with an OpenTelemetry SDK recording, the MCP
SDK's server span (``tools/call {tool}``, with the ``mcp.*`` attributes) is
the parent of the call's ``execute_tool`` span.

When a client's offered tools change (a call moved its state, the live
configuration changed, an announced service appeared or expired), it is told
the way its protocol revision says: a ``ToolsListChanged`` event on its
``subscriptions/listen`` streams (2026-07-28), or a
``notifications/tools/list_changed`` (earlier revisions).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import anyio
import mcp_types as mcp
from anyio.abc import TaskStatus
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolbus.application.agent.audit import AuditSink
from toolbus.application.agent.code_hooks import CompiledHooks
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.application.live.registry import LiveRegistry
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.access.permissions import Permissions, load_permissions
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import export_tools
from toolbus.domain.errors import AccessDenied, UnknownTool
from toolbus_mcp.serving.arguments import ArgumentCheck

log = logging.getLogger("toolbus.mcp")

#: The ``_meta`` key a 2026-07-28 client names its workflow with.
WORKFLOW_META_KEY = "dev.toolbus/workflow"
#: Where the HTTP gate leaves the authenticated caller in the ASGI scope.
CALLER_SCOPE_KEY = "toolbus.caller"
#: Workflows kept at most; the least recently used one is closed beyond this.
MAX_WORKFLOWS = 10_000
#: Calls one audit record covers: a client connected for days gets a record
#: (and a fresh session, in the same state) every this many calls.
CALLS_PER_RECORD = 1_000
#: Seconds a workflow may go unused before it is closed and its record written.
IDLE_TIMEOUT = 900.0
#: Characters of a client's workflow name that count.
MAX_WORKFLOW_NAME = 200


@dataclass(frozen=True, slots=True)
class McpCaller:
    """Who is calling: the user, the groups requested (``None``: absent), the initial state."""

    user: str
    groups: tuple[str, ...] | None = None
    state: str | None = None


class Workflow:
    """One MCP client's agent session, kept across requests and configuration changes.

    The session is replaced (its audit record written, the state carried over
    into the new one) when the configuration changes and every
    :data:`CALLS_PER_RECORD` calls, so that no record grows without bound.
    """

    def __init__(self, server: BusMcpServer, caller: McpCaller) -> None:
        self.caller = caller
        self._server = server
        self.session = server.start_session(caller, caller.state)
        self._calls = 0
        #: When the client last used this workflow (the server's clock).
        self.used = server.clock()
        #: Open ``subscriptions/listen`` streams: a listening client is not idle.
        self.listening = 0
        self._events = InMemorySubscriptionBus()
        self._listen = ListenHandler(self._events)
        #: The tool list last sent to the client (names and schemas), to tell changes.
        self.offered: list[dict[str, Any]] | None = None
        #: The session of a 2025-revision client, for its list-changed notifications.
        self.legacy_session: ServerSession | None = None

    async def current(self) -> AgentSession:
        """The session to use now: a new one (same state) after a change or a full record."""
        session = self.session
        self.used = self._server.clock()
        if (
            session.registry is not self._server.tools.registry
            or self._calls >= self._server.calls_per_record
        ):
            self.session = self._server.start_session(self.caller, session.state)
            self._calls = 0
            await session.close()
        return self.session

    def counted(self) -> None:
        """One more call made through the current session."""
        self._calls += 1

    def tool_list(self) -> list[dict[str, Any]]:
        """What would be offered now, in MCP's shape."""
        session = self.session
        registry = self._server.tools.registry
        if session.registry is registry:
            return session.tools("mcp")
        return _exported(registry, session.groups, session.state)

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.SubscriptionsListenRequestParams
    ) -> mcp.SubscriptionsListenResult:
        self.listening += 1
        try:
            return await self._listen(ctx, params)
        finally:
            self.listening -= 1
            self.used = self._server.clock()

    async def notify_if_changed(self) -> bool:
        """Tell the client when its tool list differs from the one it was sent last."""
        if self.offered is None or self.tool_list() == self.offered:
            return False
        self.offered = None  # told once; the next tools/list sets it again
        await self._events.publish(ToolsListChanged())
        legacy = self.legacy_session
        if legacy is not None:
            try:
                await legacy.send_tool_list_changed()
            except Exception as exc:  # the client may have gone; nothing to tell then
                log.debug("could not notify an MCP client of a tool list change: %s", exc)
        return True

    async def close(self) -> None:
        self._listen.close()
        await self.session.close()


class BusMcpServer:
    """An MCP server over the tools of a bus.

    Args:
        tools: the tools facade to call through; its ``registry`` is the
            configuration (attach it to a :class:`LiveRegistry` to follow changes).
        live: the live registry ``tools`` follows, if any: its changes notify clients.
        caller: the one caller of a stdio server (user, groups, state). HTTP
            servers take callers from the HTTP gate instead.
        name: the server name MCP clients see.
        timeout, audit, metrics, code_hooks: as for :class:`AgentSession`.
        max_workflows: workflows kept; the least recently used is closed beyond it.
        calls_per_record: calls one session (one audit record) covers at most.
        idle_timeout: seconds after which an unused workflow is closed.
        clock: monotonic seconds, for idleness.
    """

    def __init__(
        self,
        tools: Tools,
        *,
        live: LiveRegistry | None = None,
        caller: McpCaller | None = None,
        name: str = "toolbus",
        timeout: float | None = None,
        audit: AuditSink | None = None,
        metrics: ToolbusMetrics | None = None,
        code_hooks: CompiledHooks | None = None,
        max_workflows: int = MAX_WORKFLOWS,
        calls_per_record: int = CALLS_PER_RECORD,
        idle_timeout: float = IDLE_TIMEOUT,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.tools = tools
        self.live = live
        self.caller = caller
        self.timeout = timeout
        self._audit = audit
        self._metrics = metrics
        self._code_hooks = code_hooks
        self._max_workflows = max_workflows
        self.calls_per_record = calls_per_record
        self.idle_timeout = idle_timeout
        self.clock = clock
        self._workflows: OrderedDict[tuple[Any, ...], Workflow] = OrderedDict()
        self._permissions: tuple[Registry, Permissions] | None = None
        self._arguments = ArgumentCheck()
        self._changes = anyio.Event()
        if live is not None:
            live.on_change(lambda _registry: self._changes.set())
        self.server: Server[Any] = _ListChangingServer(
            name,
            get_tool_input_schema=self._input_schema,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=self._listen,
        )

    # ------------------------------------------------------------- callers

    def start_session(self, caller: McpCaller, state: str | None) -> AgentSession:
        """An agent session for ``caller`` in ``state``; raises :class:`AccessDenied` (audited)."""
        return AgentSession(
            self.tools,
            user=caller.user,
            groups=caller.groups,
            state=state,
            timeout=self.timeout,
            audit=self._audit,
            metrics=self._metrics,
            code_hooks=self._code_hooks,
        )

    def admit(self, caller: McpCaller) -> None:
        """Check ``caller``'s groups against the permissions; :class:`AccessDenied` if beyond.

        A refusal is audited and counted exactly as an agent session's is.
        """
        registry = self.tools.registry
        if self._permissions is None or self._permissions[0] is not registry:
            self._permissions = (registry, load_permissions(registry.snapshot))
        try:
            self._permissions[1].check(caller.user, caller.groups)
        except AccessDenied:
            self.start_session(caller, caller.state)  # raises again, after auditing
            raise

    async def workflow(self, caller: McpCaller, name: str = "") -> Workflow:
        """The workflow of ``caller`` called ``name``, started on first use."""
        key = (caller, name)
        found = self._workflows.get(key)
        if found is not None:
            self._workflows.move_to_end(key)
            return found
        found = self._workflows[key] = Workflow(self, caller)
        while len(self._workflows) > self._max_workflows:
            _, dropped = self._workflows.popitem(last=False)
            await dropped.close()
        return found

    async def _workflow_for(self, ctx: ServerRequestContext[Any, Any]) -> Workflow:
        request = ctx.request
        scope: Mapping[str, Any] = getattr(request, "scope", None) or {}
        caller = scope.get(CALLER_SCOPE_KEY) or self.caller
        if not isinstance(caller, McpCaller):
            raise RuntimeError("an HTTP MCP request reached the bus without passing the gate")
        legacy = ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS
        if legacy:
            headers = getattr(request, "headers", None) or {}
            name = str(headers.get("mcp-session-id", ""))
            if name and tracing.recording():
                tracing.annotate(conventions.mcp_session(name))
        else:
            meta = ctx.meta or {}
            name = str(meta.get(WORKFLOW_META_KEY, "") if isinstance(meta, Mapping) else "")
        try:
            workflow = await self.workflow(caller, name[:MAX_WORKFLOW_NAME])
        except AccessDenied as exc:  # the configuration changed under a running client
            raise MCPError(mcp.INVALID_REQUEST, str(exc)) from None
        if legacy:
            workflow.legacy_session = ctx.session
        return workflow

    async def _session_for(
        self, ctx: ServerRequestContext[Any, Any]
    ) -> tuple[Workflow, AgentSession]:
        workflow = await self._workflow_for(ctx)
        try:
            return workflow, await workflow.current()
        except AccessDenied as exc:  # the new configuration no longer grants the groups
            raise MCPError(mcp.INVALID_REQUEST, str(exc)) from None

    # ------------------------------------------------------------- MCP handlers

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListToolsResult:
        workflow, session = await self._session_for(ctx)
        offered = session.tools("mcp")
        workflow.offered = offered
        return mcp.ListToolsResult(tools=[mcp.Tool.model_validate(tool) for tool in offered])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.CallToolRequestParams
    ) -> mcp.CallToolResult:
        workflow, session = await self._session_for(ctx)
        arguments = params.arguments or {}
        self._arguments.check(session, params.name, arguments)
        with _continued(ctx):
            outcome = await session.call(params.name, arguments)
        workflow.counted()
        if outcome.transition is not None:
            await workflow.notify_if_changed()
        return mcp.CallToolResult(
            content=[mcp.TextContent(text=outcome.observation)], is_error=not outcome.ok
        )

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.SubscriptionsListenRequestParams
    ) -> mcp.SubscriptionsListenResult:
        workflow = await self._workflow_for(ctx)
        return await workflow.listen(ctx, params)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        # Used to check Mcp-Param headers on the 2026-07-28 HTTP path, before the
        # caller is known; the schema of a tool does not depend on the caller.
        try:
            tool = self.tools.registry.tool(name)
        except UnknownTool:
            return None
        schema: Mapping[str, Any] = export_tools([tool], "mcp")[0]["inputSchema"]
        return schema

    # ------------------------------------------------------------- changes

    async def follow_changes(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Until cancelled: tell clients about configuration changes that change their
        tools, and close workflows left unused for ``idle_timeout`` seconds."""
        task_status.started()
        while True:
            with anyio.move_on_after(self.idle_timeout / 4):
                await self._changes.wait()
            await self.close_idle()
            if not self._changes.is_set():
                continue
            self._changes = anyio.Event()
            for workflow in list(self._workflows.values()):
                await workflow.notify_if_changed()

    async def close_idle(self) -> int:
        """Close the workflows unused for ``idle_timeout`` seconds; how many were."""
        cutoff = self.clock() - self.idle_timeout
        idle = [
            key
            for key, workflow in self._workflows.items()
            if workflow.used <= cutoff and not workflow.listening
        ]
        for key in idle:
            await self._workflows.pop(key).close()
        return len(idle)

    async def close(self) -> None:
        """Close every workflow's session (writing their audit records)."""
        while self._workflows:
            _, workflow = self._workflows.popitem(last=False)
            await workflow.close()


class _ListChangingServer(Server[Any]):
    """Says in the 2025 revisions' handshake that it announces tool list changes.

    The SDK's transports build the handshake from the server alone, so the
    flag has to come from here rather than from whoever runs the transport.
    """

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True),
            experimental_capabilities,
            extensions,
        )


def _continued(ctx: ServerRequestContext[Any, Any]) -> AbstractContextManager[None]:
    """The client's trace, from the request's ``_meta``, current for the call.

    With an OpenTelemetry SDK recording, the SDK's server span is already the
    current span, a child of that context, and the call continues it; without
    one, the context in ``_meta`` is made current here, so the bus call still
    continues the client's trace.
    """
    if tracing.recording():
        return nullcontext()
    meta = ctx.meta if isinstance(ctx.meta, Mapping) else {}
    carried = {key: value for key, value in meta.items() if isinstance(value, str)}
    parent = tracing.received(carried)
    return tracing.activated(parent) if parent is not None else nullcontext()


def _exported(registry: Registry, groups: Sequence[str], state: str) -> list[dict[str, Any]]:
    return export_tools(registry.availability(groups, state).available, "mcp")
