# One job: McpToolset, one MCP server's tools kept served on the bus. Listing, addresses
# and translation are modules beside it; what stays is the connection's life (start,
# restart, relist, a stream the server ends), which its calls and its relists share.
"""MCP servers as tool services: ``toolbus serve mcp``.

A :class:`McpToolset` starts an MCP server (a command speaking stdio) or
connects to one (a streamable HTTP URL) with the official SDK's client, lists
its tools, and serves them on the bus as one tool service whose id is the
toolset's name. Each MCP tool is announced as a tool descriptor named
``sanitize_toolname(f"{toolset}_{tool}")``, so a hook naming
``toolset_name``/``tool_name`` reaches it unchanged, and so does any agent
following announcements.

While it runs:

* a server that dies (or whose connection drops) is restarted with backoff;
  calls in flight, and calls made until it is back, fail with ``unavailable``
  naming the toolset;
* the server's tools-list-changed notification makes the toolset list the
  tools again and re-announce them, at most once per ``relist_interval``
  (changes in between are taken up by the next listing, none is lost);
* a tool list is read for at most ``max_pages`` pages and ``max_tools``
  tools (:mod:`~toolbus_mcp.importing.listing`): a server beyond either is
  refused at start, and keeps its previous tools after a change, so one
  server cannot flood the bus or the registry;
* replicas of the bridge compete for calls like replicas of any service;
* each call carries its trace context in the request's ``_meta``
  (``traceparent``, ``tracestate``), so the MCP server continues the trace;
* a server's questions (elicitation, sampling, roots) go to the bus caller of
  the call that asks, as the tool's own (:mod:`toolbus_mcp.importing.asking`).

Secrets for the server (environment variables, HTTP headers) are values this
process reads from its own environment (:mod:`~toolbus_mcp.importing.addresses`);
they never reach a descriptor, an announcement or a log line.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any, cast

import anyio
import httpx2
import mcp_types as mcp
from anyio.abc import TaskStatus
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from toolbus.application.calls.host import DEFAULT_CONCURRENCY, running
from toolbus.application.calls.service import ToolService
from toolbus.application.identity.verifying import CallVerifier
from toolbus.application.live.announcements import DEFAULT_INTERVAL, Announcer
from toolbus.application.live.companions import alongside
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.errors import (
    BadRequest,
    ConfigError,
    DeadlineExceeded,
    ToolbusError,
    ToolCallError,
    ToolServiceError,
    Unavailable,
)
from toolbus.ports import Bus
from toolbus_mcp.importing._stdio_logs import quiet_parse_errors
from toolbus_mcp.importing.addresses import McpServerAddress
from toolbus_mcp.importing.asking import HeldCalls, SendRound, call_answering, can_answer
from toolbus_mcp.importing.listing import all_tools
from toolbus_mcp.importing.translation import (
    MCP_TOOL_PARAM,
    Approve,
    observation,
    toolset_tools,
)

log = logging.getLogger("toolbus.mcp")

#: Seconds the first connection (start, handshake, tool list) may take.
DEFAULT_CONNECT_TIMEOUT = 30.0
#: Seconds one MCP tool call may take.
DEFAULT_CALL_TIMEOUT = 60.0
#: Restart delays: the first, and the most it doubles up to.
FIRST_RESTART_DELAY = 0.5
MAX_RESTART_DELAY = 30.0
#: Seconds between two listings of a server's tools after it said they changed.
DEFAULT_RELIST_INTERVAL = 1.0
#: Pages of a tool list read at most, and tools served at most, per toolset.
DEFAULT_MAX_PAGES = 100
DEFAULT_MAX_TOOLS = 1000


class ToolsetUnavailable(ToolbusError):
    """An MCP server could not be started or reached."""


class McpToolService(ToolService):
    """Serves a toolset's MCP tools; the descriptor's ``mcp-tool`` says which to call."""

    config_params = ({"name": MCP_TOOL_PARAM, "required": True},)

    def __init__(self, toolset: McpToolset) -> None:
        self.id = toolset.name
        self.toolset = toolset
        super().__init__()

    def announced_tools(self) -> Mapping[str, Mapping[str, Any]]:
        """The toolset's tools now (its announcer starts with these)."""
        return self.toolset.tools

    def announce_with(self, announcer: Announcer) -> None:
        """Announce the tools with ``announcer`` from now on, new ones when they change."""
        self.toolset.announcer = announcer

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        tool = config.get(MCP_TOOL_PARAM)
        if not isinstance(tool, str) or not tool:
            raise BadRequest(
                f"tool service {self.id!r} needs the config value {MCP_TOOL_PARAM!r} naming the "
                "MCP tool to call; add it to the tool descriptor"
            )
        return await self.toolset.call(tool, arguments)


class McpToolset:
    """One MCP server's tools, served and announced on a bus.

    Args:
        name: the toolset's name: the service id, and the prefix of every tool name.
        server: where the MCP server is.
        groups: the tool groups of every announced tool; default none (``default``).
        connect_timeout: seconds starting (or restarting) the server may take.
        call_timeout: seconds one MCP tool call may take.
        restart_delay: seconds before the first restart; it doubles up to
            ``max_restart_delay`` while restarts keep failing.
        relist_interval: seconds at least between two listings of the tools
            after change notifications.
        max_pages: pages of ``tools/list`` read at most.
        max_tools: tools served at most.
        approve: which tools need a person's approval: ``none``, ``destructive``
            (by the tools' MCP hints) or ``all``.
    """

    def __init__(
        self,
        name: str,
        server: McpServerAddress,
        *,
        groups: Sequence[str] | None = None,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
        restart_delay: float = FIRST_RESTART_DELAY,
        max_restart_delay: float = MAX_RESTART_DELAY,
        relist_interval: float = DEFAULT_RELIST_INTERVAL,
        max_pages: int = DEFAULT_MAX_PAGES,
        max_tools: int = DEFAULT_MAX_TOOLS,
        approve: Approve = "none",
    ) -> None:
        if relist_interval < 0 or max_pages < 1 or max_tools < 1:
            raise ValueError(
                "relist_interval must be 0 or more, max_pages and max_tools at least 1"
            )
        self.name = name
        self.server = server
        self.groups = None if groups is None else tuple(groups)
        self.connect_timeout = connect_timeout
        self.call_timeout = call_timeout
        self.restart_delay = restart_delay
        self.max_restart_delay = max_restart_delay
        self.relist_interval = relist_interval
        self.max_pages = max_pages
        self.max_tools = max_tools
        self.approve: Approve = approve
        self.service = McpToolService(self)
        #: The descriptors announced now, keyed by bus tool name.
        self.tools: dict[str, dict[str, Any]] = {}
        #: Connections made so far (1 after starting; more after restarts).
        self.connections = 0
        #: What announces the tools, once they are served and announced.
        self.announcer: Announcer | None = None
        self._client: Client | None = None
        self._lost = anyio.Event()
        self._up = anyio.Event()
        #: Calls to a 2025 server whose callers can answer its questions, on connections
        #: of their own.
        self.held = HeldCalls(self._own_connection, hold=call_timeout)

    def __repr__(self) -> str:
        return f"<McpToolset {self.name!r} at {self.server.describe()}>"

    # ------------------------------------------------------------- calls

    async def call(self, tool: str, arguments: Mapping[str, Any]) -> str:
        """Call MCP tool ``tool``; its observation, or a :class:`ToolCallError`."""
        client = self._client
        if client is None:
            raise Unavailable(
                f"MCP toolset {self.name!r} is not connected to its server (restarting); "
                "try again shortly"
            )
        where = f"MCP tool {tool!r} of toolset {self.name!r}"

        async def plainly(on: Client) -> mcp.CallToolResult:
            return await on.call_tool(
                tool, dict(arguments), read_timeout_seconds=self.call_timeout, meta=_trace_meta()
            )

        try:
            with anyio.fail_after(self.call_timeout):
                if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
                    result = await call_answering(self._round(client, tool, arguments), where)
                elif can_answer():
                    result = await self.held.call(tool, arguments, plainly)
                else:
                    result = await plainly(client)
        except TimeoutError:
            raise DeadlineExceeded(
                f"MCP tool {tool!r} of toolset {self.name!r} did not answer within "
                f"{self.call_timeout:g} s"
            ) from None
        except MCPError as exc:
            raise self._call_error(tool, exc) from None
        except ToolCallError:
            raise
        except Exception as exc:
            self._connection_failed(exc)
            raise Unavailable(
                f"MCP toolset {self.name!r} is unavailable: its server failed during the call "
                f"({type(exc).__name__}); it is being restarted"
            ) from None
        return observation(self.name, tool, result)

    def _round(self, client: Client, tool: str, arguments: Mapping[str, Any]) -> SendRound:
        """Sends one ``tools/call`` round to a 2026-07-28 server: the answers to what it
        asked, with its state (each round a request of its own, with its own id)."""

        async def send(
            responses: dict[str, Any] | None, state: str | None
        ) -> mcp.CallToolResult | mcp.InputRequiredResult:
            for attempt in (1, 2):
                try:
                    return await client.session.call_tool(
                        tool,
                        dict(arguments),
                        read_timeout_seconds=self.call_timeout,
                        input_responses=responses,
                        request_state=state,
                        meta=_trace_meta(),
                        allow_input_required=True,
                    )
                except MCPError as exc:
                    # The tool's schema changed (its x-mcp-header arguments): list, send again.
                    if exc.code != mcp.HEADER_MISMATCH or attempt == 2:
                        raise
                    await client.list_tools(cache_mode="bypass")
            raise AssertionError("unreachable")

        return send

    def _call_error(self, tool: str, exc: MCPError) -> ToolCallError:
        """What a protocol error answering a call means for the caller."""
        where = f"MCP tool {tool!r} of toolset {self.name!r}"
        if exc.code == mcp.REQUEST_TIMEOUT:
            return DeadlineExceeded(f"{where} did not answer within {self.call_timeout:g} s")
        if exc.code == mcp.INVALID_PARAMS:
            return BadRequest(f"{where}: {exc}")
        if exc.code == mcp.CONNECTION_CLOSED:
            self._connection_failed(exc)
            return Unavailable(
                f"MCP toolset {self.name!r} is unavailable: its server failed during the call "
                f"({exc}); it is being restarted"
            )
        return ToolServiceError(f"{where} failed: {exc}")

    def _connection_failed(self, exc: BaseException) -> None:
        if self._client is not None:
            log.warning("MCP toolset %r: call failed, restarting its server: %s", self.name, exc)
            self._down()
            self._lost.set()

    def _down(self) -> None:
        # Calls from now on fail at once, until the server is back.
        self._client = None
        if self._up.is_set():
            self._up = anyio.Event()

    async def wait_connected(self) -> None:
        """Wait until the server is connected: started, or restarted after a failure."""
        await self._up.wait()

    # ------------------------------------------------------------- serving

    async def serve(
        self,
        bus: Bus,
        *,
        announce: bool = True,
        interval: float = DEFAULT_INTERVAL,
        concurrency: int = DEFAULT_CONCURRENCY,
        drain_timeout: float = 30.0,
        verifier: CallVerifier | None = None,
        task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, serve and announce the tools until cancelled; restart the server as needed.

        ``verifier`` makes the service accept only signed calls (see docs/security.md).

        Signals ``task_status`` once the tools are served and announced. Raises
        :class:`ToolsetUnavailable` or :class:`ConfigError` when the first
        connection fails (see :meth:`connected`).
        """
        async with (
            self.connected(),
            running(
                bus,
                self.service,
                concurrency=concurrency,
                drain_timeout=drain_timeout,
                verifier=verifier,
            ),
            alongside(bus, [self.service], announce=announce, interval=interval),
        ):
            task_status.started()
            await anyio.sleep_forever()

    @asynccontextmanager
    async def connected(self) -> AsyncIterator[None]:
        """Connected to the server for the block, its tools listed; restarted as needed.

        Raises :class:`ToolsetUnavailable` or :class:`ConfigError` when the first
        connection fails: a toolset that never worked is a configuration
        problem, not an outage to wait out. ``toolbus serve mcp`` serves
        :attr:`service` inside it.
        """
        try:
            async with anyio.create_task_group() as tasks:
                self.held.group = tasks  # held calls end with the connection
                await tasks.start(self._keep_connected)
                try:
                    yield
                finally:
                    self.held.group = None
                    tasks.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            # Starting failed: raise the reason itself, not a task group's wrapper.
            failures = group.subgroup((ConfigError, ToolsetUnavailable))
            if failures is not None and len(failures.exceptions) == 1:
                only = failures.exceptions[0]
                if isinstance(only, ConfigError | ToolsetUnavailable):
                    raise only from None
            raise

    async def _keep_connected(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        delay = self.restart_delay
        started = False
        while True:
            # Starting, the handshake and listing the tools share one deadline: the
            # scope encloses the client's whole life (its task group with it), and its
            # deadline is lifted once connected.
            connecting = anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout)
            try:
                with connecting:
                    async with self._connect() as (client, tools):
                        connecting.deadline = math.inf
                        self._install(client, tools)
                        if not started:
                            started = True
                            task_status.started()
                        else:
                            log.warning("MCP toolset %r: server restarted", self.name)
                            await self._reannounce()
                        delay = self.restart_delay
                        await self._follow(client)
                if connecting.cancelled_caught:
                    raise TimeoutError
            except Exception as exc:
                reason = _innermost(exc)
                if not started:
                    if isinstance(reason, ConfigError):
                        raise reason from None
                    raise ToolsetUnavailable(
                        f"MCP toolset {self.name!r}: cannot start or reach its server "
                        f"{self.server.describe()}: {_describe(reason)}"
                    ) from None
                log.warning(
                    "MCP toolset %r: connection to its server lost: %s",
                    self.name,
                    _describe(reason),
                )
            finally:
                self._down()
            log.info("MCP toolset %r: restarting its server in %g s", self.name, delay)
            await anyio.sleep(delay)
            delay = min(delay * 2, self.max_restart_delay)

    @asynccontextmanager
    async def _connect(self) -> AsyncIterator[tuple[Client, dict[str, dict[str, Any]]]]:
        """A connected client and the descriptors of the tools the server lists now."""
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(self._client_for(stack))
            listed = await all_tools(client, self.name, self.max_pages, self.max_tools)
            tools = toolset_tools(self.name, listed, groups=self.groups, approve=self.approve)
            self.connections += 1
            yield client, tools

    @asynccontextmanager
    async def _own_connection(self, callbacks: dict[str, Any]) -> AsyncIterator[Client]:
        """A connection of one call's own to the server (its questions are that call's)."""
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(self._client_for(stack, callbacks))
            yield client

    def _client_for(self, stack: AsyncExitStack, callbacks: dict[str, Any] | None = None) -> Client:
        """A client of the server. The toolset's shared connection says it can answer a
        server's questions (they are relayed per call, or refused for a caller that cannot
        answer); a call's own connection answers them for its caller."""
        callbacks = callbacks or _REFUSING
        server = self.server
        if server.command:
            quiet_parse_errors()
            program, *arguments = server.command
            parameters = StdioServerParameters(
                command=program, args=arguments, env=dict(server.env) or None
            )
            return Client(parameters, read_timeout_seconds=self.connect_timeout, **callbacks)
        assert server.url is not None
        http = httpx2.AsyncClient(
            headers=dict(server.headers),
            timeout=httpx2.Timeout(self.connect_timeout, read=max(self.call_timeout, 300.0)),
            auth=None if server.oauth is None else server.oauth.auth_for(server.url),
        )
        stack.push_async_callback(http.aclose)
        transport = streamable_http_client(server.url, http_client=http)
        return Client(transport, read_timeout_seconds=self.connect_timeout, **callbacks)

    def _install(self, client: Client, tools: dict[str, dict[str, Any]]) -> None:
        self._lost = anyio.Event()
        self._client = client
        self.tools = tools
        self._up.set()
        log.info("MCP toolset %r: serving %s", self.name, ", ".join(tools) or "no tools")

    async def _follow(self, client: Client) -> None:
        """Re-announce after tools-list changes until the connection is lost.

        Hearing a change and listing the tools again are apart: a change only
        marks the list stale; the lister takes it up at most once per
        ``relist_interval``, so a server announcing changes without pause
        costs one listing per interval, and the last change is never missed.
        """
        stale = anyio.Event()
        async with anyio.create_task_group() as tasks:

            async def relist() -> None:
                nonlocal stale
                while True:
                    await stale.wait()
                    stale = anyio.Event()
                    await self._relist(client)
                    await anyio.sleep(self.relist_interval)

            async def listen() -> None:
                try:
                    async with client.listen(tools_list_changed=True) as changes:
                        async for _ in changes:
                            stale.set()
                except (ListenNotSupportedError, MCPError) as exc:
                    # Servers before 2026-07-28 (or without subscriptions): a dead one
                    # is noticed by the next call that fails.
                    log.info("MCP toolset %r: no change notifications: %s", self.name, exc)
                    await anyio.sleep_forever()
                except SubscriptionLost:
                    pass
                else:
                    # The server ended the stream itself. One that still answers merely
                    # keeps no stream open: serve on without change notifications.
                    if await self._answers(client):
                        log.info(
                            "MCP toolset %r: its server ended the change notifications",
                            self.name,
                        )
                        await anyio.sleep_forever()
                self._lost.set()

            tasks.start_soon(relist)
            tasks.start_soon(listen)
            await self._lost.wait()
            tasks.cancel_scope.cancel()

    async def _answers(self, client: Client) -> bool:
        """Whether the server still answers (its tools listed again, within the connect
        timeout)."""
        try:
            with anyio.fail_after(self.connect_timeout):
                await all_tools(client, self.name, self.max_pages, self.max_tools)
        except Exception:
            return False
        return True

    async def _relist(self, client: Client) -> None:
        try:
            with anyio.fail_after(self.connect_timeout):
                tools = toolset_tools(
                    self.name,
                    await all_tools(client, self.name, self.max_pages, self.max_tools),
                    groups=self.groups,
                    approve=self.approve,
                )
        except ConfigError as exc:
            log.error("MCP toolset %r: keeping the previous tools: %s", self.name, exc)
            return
        if tools != self.tools:
            self.tools = tools
            await self._reannounce()

    async def _reannounce(self) -> None:
        if self.announcer is None:
            return
        try:
            await self.announcer.offer(self.tools)
        except ConfigError as exc:
            log.error("MCP toolset %r: cannot announce the new tools: %s", self.name, exc)


async def _refuse_question(context: Any, params: Any = None) -> mcp.ErrorData:
    return mcp.ErrorData(
        code=mcp.INVALID_REQUEST,
        message="the caller of this call cannot answer questions (toolbus passes a server's "
        "questions on to the bus caller that made the call, when it can answer)",
    )


_REFUSING: dict[str, Any] = {
    "elicitation_callback": _refuse_question,
    "sampling_callback": _refuse_question,
    "list_roots_callback": _refuse_question,
}


def _trace_meta() -> mcp.RequestParamsMeta | None:
    """The call's trace context for the request's ``_meta``, as MCP's conventions carry it.

    With an OpenTelemetry SDK recording, the SDK's client span puts its own
    context there instead (a child of this call's span); without one, the
    server still continues the caller's trace.
    """
    context = tracing.current_trace()
    if context is None:
        return None
    return cast(mcp.RequestParamsMeta, tracing.as_properties(context))


def _innermost(exc: BaseException) -> BaseException:
    """The first real cause inside (nested) exception groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "no answer in time (is the command an MCP server speaking stdio?)"
    return str(exc) or type(exc).__name__


__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_CONNECT_TIMEOUT",
    "McpServerAddress",
    "McpToolService",
    "McpToolset",
    "ToolsetUnavailable",
]
