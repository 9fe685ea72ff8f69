# One job: BusMcpServer, the MCP handlers of one front door over the workflows it holds.
# Its extensions (tasks, progress), the HTTP gate, health and transports are modules
# beside it; what stays is what every request shares: the workflow, its lock, its store.
"""Bus tools as an MCP server: ``toolbus mcp serve``.

:class:`BusMcpServer` is an MCP server (the SDK's low-level ``Server``) whose
tools are what an :class:`~toolbus.application.agent.session.AgentSession` would
offer its caller, opened by the process's front door
(:class:`~toolbus.application.doors.door.FrontDoor`): the caller's user, groups
and state, checked against the operator's permissions and entry states. A
``tools/call`` goes over the bus through that session, so argument options,
code hooks, deadlines, trace context, signing, audit records and metrics all
apply, and a successful call moves the state.

Each MCP client has a :class:`Workflow` of its own: its user and groups, its
state, and the agent session it calls through, which the door holds as data
under the user (:func:`workflow_key`) and resumes for every request. Over
stdio the process serves one client, so there is one workflow. Over HTTP the
bearer token names the user; clients of the 2025 protocol revisions have a
session (``Mcp-Session-Id``) and get a workflow each; the 2026-07-28 revision
has no session, so a client names its workflow in each request's ``_meta``
(:data:`WORKFLOW_META_KEY`), and requests that name none share their user's
(and groups') default workflow. A user holds at most ``max-workflows-per-user``
workflows; beyond that a new one is refused, and nobody's is closed to make room.

Tracing: a ``tools/call`` continues the trace whose context the client sent
in the request's ``_meta`` (``traceparent``, ``tracestate``), as MCP's
OpenTelemetry conventions say; with an OpenTelemetry SDK recording, the MCP
SDK's server span (``tools/call {tool}``, with the ``mcp.*`` attributes) is
the parent of the call's ``execute_tool`` span.

A call that waits for approval asks the client's person when the caller may
decide it and the client can be asked (:mod:`toolbus_mcp.serving.approvals`);
otherwise it waits for the other approvers. A tool that asks its caller for
input (elicitation, sampling, roots) has its requests relayed to the client
(:mod:`toolbus_mcp.serving.asking`), as far as the client declared it can answer.

When a client's offered tools change (a call moved its state, the live
configuration changed, an announced service appeared or expired), it is told
the way its protocol revision says: a ``ToolsListChanged`` event on its
``subscriptions/listen`` streams (2026-07-28), or a
``notifications/tools/list_changed`` (earlier revisions).
"""

from __future__ import annotations

import functools
import json
import logging
import math
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Protocol

import anyio
import mcp_types as mcp
from anyio.abc import TaskStatus
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.agent.asking import listening, replying
from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.relaying import continuing, relaying
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import Held, HeldAlready, HeldKey, InProcessHolder
from toolbus.application.doors.keeping import WORKFLOW
from toolbus.application.doors.store_health import RETRY_AFTER, StoreHealth
from toolbus.application.doors.stored import StoredHolder, session_key
from toolbus.application.live.registry import LiveRegistry
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls.input_requests import InputKind, InputReply
from toolbus.domain.errors import AccessDenied, LimitReached, StateStoreUnavailable, UnknownTool
from toolbus.ports import WatchableStateStore
from toolbus_mcp.serving.approvals import ClientAsker, InputNeeded, reply_of
from toolbus_mcp.serving.arguments import ArgumentCheck
from toolbus_mcp.serving.asking import asked_result, client_kinds, continuation_of, relay_for
from toolbus_mcp.serving.progress import call_reporting, notifying, wants_progress

log = logging.getLogger("toolbus.mcp")

#: The JSON-RPC error code of a request that needs the state store while it is away
#: (its ``data`` says when to try again: ``{"retry_after": seconds}``).
STORE_UNAVAILABLE = -32050

#: The ``_meta`` key a 2026-07-28 client names its workflow with.
WORKFLOW_META_KEY = "dev.toolbus/workflow"
#: In a tool result's ``_meta``: the seconds after which a call a rate limit or a spent
#: budget refused may pass, and which limit refused it (the text says so too, for a model).
RETRY_AFTER_META_KEY = "dev.toolbus/retry-after"
LIMIT_META_KEY = "dev.toolbus/limit"
#: Where the HTTP gate leaves the authenticated caller in the ASGI scope.
CALLER_SCOPE_KEY = "toolbus.caller"
#: Characters of a client's workflow name that count.
MAX_WORKFLOW_NAME = 200


@dataclass(frozen=True, slots=True)
class McpCaller:
    """Who is calling: the user, the groups requested (``None``: absent), the initial state."""

    user: str
    groups: tuple[str, ...] | None = None
    state: str | None = None


@functools.lru_cache(maxsize=4096)
def workflow_key(caller: McpCaller, name: str) -> HeldKey:
    """A workflow's key: its user, then the groups and the client's name for it.

    The user comes first so that one user's names never meet another's; the
    groups are part of it, so that a client asking for other groups gets a
    workflow of its own rather than another one's state.
    """
    groups = None if caller.groups is None else list(caller.groups)
    return HeldKey(caller.user, WORKFLOW, json.dumps([groups, name[:MAX_WORKFLOW_NAME]]))


class TasksExtension(Protocol):
    """What makes calls tasks: the tasks extension (:mod:`toolbus_mcp.serving.tasks`)."""

    def wanted(
        self, ctx: ServerRequestContext[Any, Any], session: AgentSession, name: str
    ) -> bool: ...

    async def start(
        self,
        workflow: Workflow,
        session: AgentSession,
        name: str,
        arguments: Mapping[str, Any],
        kinds: frozenset[InputKind] = frozenset(),
        given: InputReply | None = None,
    ) -> mcp.CallToolResult | dict[str, Any]: ...

    async def listen(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp.SubscriptionsListenRequestParams,
        inner: Callable[
            [ServerRequestContext[Any, Any], mcp.SubscriptionsListenRequestParams],
            Awaitable[mcp.SubscriptionsListenResult],
        ],
    ) -> mcp.SubscriptionsListenResult: ...


class Workflow:
    """One MCP client's workflow in this process: what belongs to its connections.

    The workflow's session is held by the front door as data under
    :attr:`key`; here are a lock (its calls run one at a time, so its state
    moves in order), its ``subscriptions/listen`` streams, and the tool list
    it was last sent, to tell when it changed.
    """

    def __init__(self, server: BusMcpServer, key: HeldKey) -> None:
        self.key = key
        self._server = server
        # fast_acquire: an uncontended lock costs no trip round the event loop.
        self.lock = anyio.Lock(fast_acquire=True)
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

    async def held(self) -> Held | None:
        self.used = self._server.clock()
        return await self._server.door.holder.get(self.key)

    async def tool_list(self) -> list[dict[str, Any]] | None:
        """What would be offered now, in MCP's shape (``None``: the workflow ended)."""
        held = await self._server.door.holder.get(self.key)
        if held is None:
            return None
        try:
            return self._server.door.resumed(held.session).tools("mcp")
        except AccessDenied:
            return []

    async def listen(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.SubscriptionsListenRequestParams
    ) -> mcp.SubscriptionsListenResult:
        self.listening += 1
        try:
            if self.offered is None:
                # The list the client is taken to hold: what it would be offered now (its
                # tools/list may have gone to another replica).
                self.offered = await self.tool_list()
            async with anyio.create_task_group() as tasks:
                if self.listening == 1:
                    tasks.start_soon(self._follow_moves)
                try:
                    result = await self._listen(ctx, params)
                finally:
                    tasks.cancel_scope.cancel()
            return result
        finally:
            self.listening -= 1
            self.used = self._server.clock()

    async def _follow_moves(self) -> None:
        """While the client listens here: tell it when a call on *another* replica moved
        the workflow, as the state store reports (a store that cannot watch: never)."""
        holder = self._server.door.holder
        if not isinstance(holder, StoredHolder):
            return
        store = holder.store
        if not isinstance(store, WatchableStateStore):
            return
        async with store.watch(holder.namespace, session_key(self.key)) as changes:
            async for _ in changes:
                await self.notify_if_changed()

    async def notify_if_changed(self) -> bool:
        """Tell the client when its tool list differs from the one it was sent last."""
        if self.offered is None or await self.tool_list() == self.offered:
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

    def close(self) -> None:
        self._listen.close()


class BusMcpServer:
    """An MCP server over the tools of a bus, its callers' sessions opened by a front door.

    Args:
        door: the front door (:class:`~toolbus.application.doors.door.FrontDoor`):
            its tools (attach them to a :class:`LiveRegistry` to follow changes),
            permissions, entry states, hooks, limits, audit and metrics.
        live: the live registry the tools follow, if any: its changes notify clients.
        caller: the one caller of a stdio server (user, groups, state). HTTP
            servers take callers from the HTTP gate instead.
        name: the server name MCP clients see.
        clock: monotonic seconds, for idleness (the door's by default).
    """

    def __init__(
        self,
        door: FrontDoor,
        *,
        live: LiveRegistry | None = None,
        caller: McpCaller | None = None,
        name: str = "toolbus",
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.door = door
        self.tools = door.tools
        self.live = live
        self.caller = caller
        self.clock = door.holder.clock if clock is None else clock
        self._workflows: dict[HeldKey, Workflow] = {}
        self._arguments = ArgumentCheck()
        #: The tasks extension, once installed (:class:`~toolbus_mcp.serving.tasks.McpTasks`).
        self.tasks: TasksExtension | None = None
        self._store_away = ThrottledLog(log)
        holder = door.holder
        #: Whether the store workflows are kept in answers (None: they are kept here).
        self.store_health = StoreHealth(holder.store) if isinstance(holder, StoredHolder) else None
        self._changes = anyio.Event()
        if live is not None:
            live.on_change(lambda _registry: self._changes.set())
        self.server: Server[Any] = _ListChangingServer(
            name,
            version=metadata.version("toolbus-mcp"),
            # A tool list is the caller's own (their groups and state): no cache shares it.
            cache_hints={"tools/list": CacheHint(ttl_ms=0, scope="private")},
            get_tool_input_schema=self._input_schema,
            on_list_tools=self.store_needed(self._list_tools),
            on_subscriptions_listen=self.store_needed(self._listen),
        )
        # Registered as a plain handler: its results include the tasks extension's
        # CreateTaskResult, which the typed hook does not name.
        self.server.add_request_handler(
            "tools/call", mcp.CallToolRequestParams, self.store_needed(self._call_tool)
        )

    @property
    def idle_timeout(self) -> float:
        return self.door.settings.session_idle_timeout

    # ------------------------------------------------------------- callers

    def admit(self, caller: McpCaller) -> None:
        """Check ``caller``'s groups and state; :class:`AccessDenied` (or ``StateRefused``).

        A refusal is audited and counted exactly as an agent session's is.
        """
        self.door.admit(caller.user, caller.groups, caller.state)

    async def workflow(self, caller: McpCaller, name: str = "") -> Workflow:
        """The workflow of ``caller`` called ``name``; its session starts on first use.

        Raises :class:`AccessDenied` (audited) for groups or a state the caller
        may not have, and :class:`LimitReached` when the user holds as many
        workflows as allowed: nobody's workflow is closed to make room.
        """
        key = workflow_key(caller, name[:MAX_WORKFLOW_NAME])
        if await self.door.holder.get(key) is None:
            await self.door.held.check_room(caller.user, WORKFLOW)
            session = self.door.open(caller.user, caller.groups, caller.state, counted=False)
            with suppress(HeldAlready):  # a concurrent first request started it: use that
                await self.door.held.hold(session, WORKFLOW, key.id)
        found = self._workflows.get(key)
        if found is None:
            found = self._workflows[key] = Workflow(self, key)
        return found

    def caller_of(self, ctx: ServerRequestContext[Any, Any]) -> McpCaller:
        """Who makes this request: the HTTP gate's caller, or the stdio server's one."""
        scope: Mapping[str, Any] = getattr(ctx.request, "scope", None) or {}
        caller = scope.get(CALLER_SCOPE_KEY) or self.caller
        if not isinstance(caller, McpCaller):
            raise RuntimeError("an HTTP MCP request reached the bus without passing the gate")
        return caller

    async def notify_moved(self, key: HeldKey) -> None:
        """Tell the clients of workflow ``key`` here that a call moved it (their tools may
        have changed)."""
        workflow = self._workflows.get(key)
        if workflow is not None:
            await workflow.notify_if_changed()

    async def _workflow_for(self, ctx: ServerRequestContext[Any, Any]) -> Workflow:
        request = ctx.request
        caller = self.caller_of(ctx)
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
            workflow = await self.workflow(caller, name)
        except (AccessDenied, LimitReached) as exc:
            raise MCPError(mcp.INVALID_REQUEST, str(exc)) from None
        if legacy:
            workflow.legacy_session = ctx.session
        return workflow

    async def _resumed(
        self, ctx: ServerRequestContext[Any, Any], workflow: Workflow
    ) -> tuple[Workflow, Held, AgentSession]:
        """The workflow's session for this request (hold ``workflow.lock``)."""
        held = await workflow.held()
        if held is None:  # it ended between the two lookups: start again
            workflow = await self._workflow_for(ctx)
            held = await workflow.held()
            assert held is not None
        try:
            return workflow, held, self.door.held.resume(held)
        except AccessDenied as exc:  # the configuration no longer grants the groups
            raise MCPError(mcp.INVALID_REQUEST, str(exc)) from None

    # ------------------------------------------------------------- MCP handlers

    def store_needed(self, handler: Callable[..., Any]) -> Callable[..., Any]:
        """``handler``, answering a JSON-RPC error (:data:`STORE_UNAVAILABLE`) with when to
        try again, rather than an internal error, when the state store is away."""

        @functools.wraps(handler)
        async def handle(*args: Any) -> Any:
            try:
                return await handler(*args)
            except StateStoreUnavailable as exc:
                if self.store_health is not None:
                    self.store_health.failed(exc)
                self._store_away.warning(
                    "store", "an MCP request found the state store away: %s", exc
                )
                raise MCPError(
                    STORE_UNAVAILABLE,
                    "the state store the workflows are kept in cannot be reached now; try "
                    f"again in {RETRY_AFTER} s (a call whose workflow could not be saved "
                    "after it ran may have run)",
                    {"retry_after": RETRY_AFTER, "down": "state"},
                ) from None

        return handle

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.PaginatedRequestParams | None
    ) -> mcp.ListToolsResult:
        workflow = await self._workflow_for(ctx)
        async with workflow.lock:
            workflow, held, session = await self._resumed(ctx, workflow)
            offered = session.tools("mcp")
            await self.door.held.touch(held)
        workflow.offered = offered
        return mcp.ListToolsResult(tools=[mcp.Tool.model_validate(tool) for tool in offered])

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.CallToolRequestParams
    ) -> mcp.CallToolResult | mcp.InputRequiredResult | dict[str, Any]:
        workflow = await self._workflow_for(ctx)
        # One call at a time per workflow, so that its state moves in order.
        async with workflow.lock:
            workflow, held, session = await self._resumed(ctx, workflow)
            arguments = params.arguments or {}
            refusal = self._arguments.refusal(session, params.name, arguments)
            if refusal is not None:
                return refusal
            tasks = self.tasks
            outcome: CallOutcome | None = None
            if tasks is None or not tasks.wanted(ctx, session, params.name):
                # Made while the request waits: streamed to the client as progress
                # notifications when it asked for them.
                reply = reply_of(params)
                relay = relay_for(ctx)
                given = continuation_of(params)
                try:
                    with (
                        _continued(ctx),
                        listening(ClientAsker(ctx, session.user)),
                        replying(reply) if reply is not None else nullcontext(),
                        relaying(relay) if relay is not None else nullcontext(),
                        continuing(given) if given is not None else nullcontext(),
                    ):
                        if wants_progress(ctx):
                            outcome = await call_reporting(
                                session, params.name, arguments, notifying(ctx)
                            )
                        else:
                            outcome = await session.call(params.name, arguments)
                except InputNeeded as needed:  # asked before anything ran: nothing to keep
                    return needed.result()
                await self.door.held.keep(held, session)
        if outcome is None:  # a task makes the call, beside the workflow's other calls
            assert tasks is not None
            with _continued(ctx):
                return await tasks.start(
                    workflow,
                    session,
                    params.name,
                    arguments,
                    client_kinds(ctx),
                    continuation_of(params),
                )
        asked = asked_result(outcome, ctx)
        if asked is not None:
            return asked
        if outcome.transition is not None:
            await workflow.notify_if_changed()
        meta = None
        if outcome.retry_after is not None:
            meta = {
                RETRY_AFTER_META_KEY: max(1, math.ceil(outcome.retry_after)),
                LIMIT_META_KEY: outcome.limit,
            }
        return mcp.CallToolResult(
            content=[mcp.TextContent(text=outcome.observation)], is_error=not outcome.ok, _meta=meta
        )

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: mcp.SubscriptionsListenRequestParams
    ) -> mcp.SubscriptionsListenResult:
        workflow = await self._workflow_for(ctx)
        if self.tasks is not None:  # the stream may follow tasks too
            return await self.tasks.listen(ctx, params, workflow.listen)
        return await workflow.listen(ctx, params)

    def _input_schema(self, name: str) -> Mapping[str, Any] | None:
        # Used to check Mcp-Param headers on the 2026-07-28 HTTP path, before the
        # caller is known; the schema of a tool does not depend on the caller. The
        # SDK asks for it on every call: the argument check's, built once per
        # configuration, serves both.
        try:
            return self._arguments.compiled(self.tools.registry, name).schema
        except UnknownTool:
            return None

    # ------------------------------------------------------------- changes

    async def follow_changes(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Until cancelled: tell clients about configuration changes that change their
        tools, and close workflows left unused for the idle timeout."""
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
        """Close the workflows unused for the idle timeout (their records are written);
        how many were. A workflow a client listens to is in use."""
        for workflow in self._workflows.values():
            if workflow.listening:
                held = await self.door.holder.get(workflow.key)
                if held is not None:
                    await self.door.held.touch(held)
        expired = await self.door.held.expire()
        for held in expired:
            if held.key in self._workflows:
                self._workflows.pop(held.key).close()
        return len(expired)

    async def close(self) -> None:
        """Close every workflow's session (writing their audit records); workflows held
        in a state store stay there, for the other replicas to serve."""
        in_process = isinstance(self.door.holder, InProcessHolder)
        for key, workflow in list(self._workflows.items()):
            workflow.close()
            if in_process:
                await self.door.held.release(key.owner, key.kind, key.id)
        self._workflows.clear()


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
