"""Running a :class:`~toolbus_mcp.serving.server.BusMcpServer` over stdio or streamable HTTP.

Over HTTP every request's header values lose their surrounding whitespace
(:class:`~toolbus_mcp.serving.headers.HttpFieldValues`, as HTTP defines them),
then pass :class:`CallerGate` before MCP sees it:

* ``Authorization: Bearer KEY`` must be an API key of the credential table
  (:mod:`toolbus.application.identity.credentials`; no key, or an unknown
  one: ``401``);
* ``Toolbus-Groups: a,b`` (optional; absent means ``default``, as in an agent
  session) must be within the user's permissions (beyond them: ``403``,
  audited like a refused agent session);
* ``Toolbus-State`` (optional) is a new workflow's initial state, and must be
  an entry state (otherwise ``403``, audited); a workflow that exists keeps
  the state it reached.

Then :class:`~toolbus_mcp.serving.malformed.MalformedRequests` answers a
malformed request (an ``id`` JSON-RPC does not allow, a body too large or not
JSON) with a JSON-RPC error before the SDK's transport sees it.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import uvicorn
from anyio import RunFinishedError
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream
from mcp.server.stdio import stdio_server
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from toolbus._internal.heap import settle_heap
from toolbus._internal.web_server import CommandServer, bind, cannot_listen
from toolbus.application.identity.credentials import CredentialTable, bearer_token
from toolbus.domain.errors import AccessDenied, ConfigError, ToolbusError
from toolbus_mcp.serving.headers import HttpFieldValues
from toolbus_mcp.serving.malformed import MalformedRequests
from toolbus_mcp.serving.server import CALLER_SCOPE_KEY, BusMcpServer, McpCaller

#: Header naming the tool groups an HTTP client asks for (comma-separated).
GROUPS_HEADER = "toolbus-groups"
#: Header naming an HTTP client's initial workflow state.
STATE_HEADER = "toolbus-state"
#: Where the MCP endpoint is served.
MCP_PATH = "/mcp"


class ListenError(ToolbusError):
    """The HTTP address cannot be listened on (in use, not this host's, not allowed)."""


async def serve_stdio(server: BusMcpServer) -> None:
    """Serve one MCP client on this process's stdin and stdout until it disconnects.

    Cancelling it (a stop signal) ends it at once, whether or not the client is
    writing.
    """
    async with _stdin_lines() as lines, stdio_server(stdin=cast(Any, lines)) as (read, write):
        settle_heap()  # connected and configured: what is built now stays
        await server.server.run(read, write, server.server.create_initialization_options())


@asynccontextmanager
async def _stdin_lines() -> AsyncIterator[MemoryObjectReceiveStream[str]]:
    """The client's lines on stdin, read by a daemon thread, for the SDK's stdio transport.

    The SDK reads stdin in a worker thread that cancelling cannot interrupt:
    stopping waited for the client's next line, and the interpreter's exit for
    the thread. A daemon thread is left behind instead. While serving, fd 0 reads
    from the null device (as the SDK arranges when it reads stdin itself), so
    nothing else in the process takes the client's messages.
    """
    wire = os.dup(0)
    quiet = os.open(os.devnull, os.O_RDONLY)
    os.dup2(quiet, 0)
    os.close(quiet)
    send, receive = anyio.create_memory_object_stream[str](16)
    token = anyio.lowlevel.current_token()

    def read() -> None:
        # closefd=False: the descriptor is the thread's until the process ends.
        with open(wire, encoding="utf-8", errors="replace", closefd=False) as lines:
            try:
                for line in lines:
                    anyio.from_thread.run(send.send, line, token=token)
                anyio.from_thread.run_sync(send.close, token=token)
            except (RunFinishedError, anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass  # the transport is gone: nobody wants the rest

    threading.Thread(target=read, name="MCP stdin", daemon=True).start()
    try:
        async with receive:
            yield receive
    finally:
        os.dup2(wire, 0)


def parse_groups(value: str | None) -> tuple[str, ...] | None:
    """``"a, b"`` as ``("a", "b")``; absent is ``None``, an empty value no groups."""
    if value is None:
        return None
    return tuple(group.strip() for group in value.split(",") if group.strip())


class CallerGate:
    """ASGI middleware: authenticate the bearer key, admit the groups, pass the caller on."""

    def __init__(self, app: ASGIApp, server: BusMcpServer, credentials: CredentialTable) -> None:
        self.app = app
        self.server = server
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        identity = self.credentials.authenticate(bearer_token(headers.get("authorization")))
        if identity is None:
            await _refuse(
                send,
                401,
                "a valid bearer token is required: send Authorization: Bearer KEY with an "
                "API key of the credential table",
                {"www-authenticate": 'Bearer realm="toolbus"'},
            )
            return
        caller = McpCaller(
            identity.user, parse_groups(headers.get(GROUPS_HEADER)), headers.get(STATE_HEADER)
        )
        try:
            self.server.admit(caller)
        except AccessDenied as exc:
            await _refuse(send, 403, str(exc))
            return
        except ConfigError as exc:  # the configuration's permissions section is broken
            await _refuse(send, 500, str(exc))
            return
        scope[CALLER_SCOPE_KEY] = caller
        await self.app(scope, receive, send)


async def _refuse(
    send: Send, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    body = json.dumps({"error": message}).encode("utf-8")
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(name.encode(), value.encode()) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def http_app(
    server: BusMcpServer,
    credentials: CredentialTable,
    *,
    host: str = "127.0.0.1",
    json_response: bool = False,
) -> Any:
    """The ASGI application: the SDK's streamable HTTP endpoint at ``/mcp``, behind the gate.

    Stateful: clients of the 2025 revisions get an ``Mcp-Session-Id`` (and a
    workflow each); 2026-07-28 requests are served one at a time, as that
    revision defines. ``json_response``: every answer is one JSON body, never
    an event stream (a ``subscriptions/listen`` stream excepted), which costs
    less per call; there are then no keep-alive pings while a call runs, and a
    call whose client hangs up is not cancelled.
    """
    app = server.server.streamable_http_app(
        streamable_http_path=MCP_PATH, host=host, json_response=json_response
    )
    return HttpFieldValues(CallerGate(MalformedRequests(app), server, credentials))


async def serve_http(
    server: BusMcpServer,
    credentials: CredentialTable,
    *,
    host: str = "127.0.0.1",
    port: int,
    json_response: bool = False,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``http://host:port/mcp`` with uvicorn until cancelled (``json_response``:
    see :func:`http_app`). Signals ``task_status`` with the port listened on (the one
    the system chose, for ``port=0``).

    Raises :class:`ListenError` when the address cannot be listened on.
    """
    try:
        listener = bind(host, port)
    except OSError as exc:
        raise ListenError(cannot_listen(host, port, exc)) from None
    config = uvicorn.Config(
        http_app(server, credentials, host=host, json_response=json_response),
        log_level="warning",
        lifespan="on",
    )
    web = CommandServer(config)

    async def serve() -> None:
        # Shielded, and stopped through should_exit instead: cancelling uvicorn
        # mid-serve would skip its shutdown (open streams, the session manager).
        with anyio.CancelScope(shield=True):
            await web.serve(sockets=[listener])

    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(serve)
            # The socket listens already: connections wait in its backlog until
            # uvicorn, which has no start-up event to await, accepts them.
            task_status.started(int(listener.getsockname()[1]))
            try:
                await anyio.sleep_forever()
            finally:
                web.shut_down()
    finally:
        listener.close()
