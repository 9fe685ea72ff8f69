"""Running a :class:`~toolbus_mcp.serving.server.BusMcpServer` over stdio or streamable HTTP.

Over HTTP every request's header values lose their surrounding whitespace
(:class:`~toolbus_mcp.serving.headers.HttpFieldValues`, as HTTP defines them),
then the request passes :class:`~toolbus_mcp.serving.gate.CallerGate` before
MCP sees it (the bearer credential, the groups, the state; ``503`` while
the state store is away), then
:class:`~toolbus_mcp.serving.malformed.MalformedRequests` answers a malformed
request (an ``id`` JSON-RPC does not allow, a body too large or not JSON)
with a JSON-RPC error before the SDK's transport sees it. Beside the
endpoint, the app serves the door's protected-resource metadata (RFC 9728,
when the token table names a ``resource``), ``/healthz`` and ``/readyz``.
"""

from __future__ import annotations

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
from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.routes import cors_middleware
from mcp.server.stdio import stdio_server
from mcp.shared.auth import ProtectedResourceMetadata
from starlette.routing import Route

from toolbus._internal.heap import settle_heap
from toolbus._internal.web_server import CommandServer, bind, cannot_listen
from toolbus.application.identity.bearer import Authenticator, ProtectedResource
from toolbus.application.identity.credentials import CredentialTable
from toolbus.domain.errors import ToolbusError
from toolbus_mcp.serving.gate import CallerGate
from toolbus_mcp.serving.headers import HttpFieldValues
from toolbus_mcp.serving.health import health_routes
from toolbus_mcp.serving.malformed import MalformedRequests
from toolbus_mcp.serving.server import BusMcpServer

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


def http_app(
    server: BusMcpServer,
    authenticator: Authenticator | CredentialTable,
    *,
    host: str = "127.0.0.1",
    json_response: bool = False,
) -> Any:
    """The ASGI application: the SDK's streamable HTTP endpoint at ``/mcp``, behind the gate.

    ``authenticator`` says who callers are (a :class:`CredentialTable` is its
    API keys alone). Stateful: clients of the 2025 revisions get an
    ``Mcp-Session-Id`` (and a workflow each); 2026-07-28 requests are served
    one at a time, as that revision defines. ``json_response``: every answer
    is one JSON body, never an event stream (a ``subscriptions/listen`` stream
    excepted), which costs less per call; there are then no keep-alive pings
    while a call runs, and a call whose client hangs up is not cancelled.
    """
    gate = authenticator_of(authenticator)
    routes = health_routes(server, gate)
    if gate.resource is not None:
        routes += metadata_routes(gate.resource)
    app = server.server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        host=host,
        json_response=json_response,
        custom_starlette_routes=routes,
    )
    open_paths = [route.path for route in routes]
    return HttpFieldValues(CallerGate(MalformedRequests(app), server, gate, open_paths=open_paths))


def authenticator_of(given: Authenticator | CredentialTable) -> Authenticator:
    """``given``, or an authenticator of the API keys ``given`` holds."""
    return given if isinstance(given, Authenticator) else Authenticator(given)


def metadata_routes(resource: ProtectedResource) -> list[Route]:
    """The RFC 9728 document, served the SDK's way (cached, readable from any origin)."""
    handler = ProtectedResourceMetadataHandler(
        ProtectedResourceMetadata.model_validate(resource.document())
    )
    return [
        Route(path, cors_middleware(handler.handle, ["GET", "OPTIONS"]), methods=["GET", "OPTIONS"])
        for path in resource.metadata_paths
    ]


async def serve_http(
    server: BusMcpServer,
    authenticator: Authenticator | CredentialTable,
    *,
    host: str = "127.0.0.1",
    port: int,
    json_response: bool = False,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``http://host:port/mcp`` with uvicorn until cancelled (``authenticator`` and
    ``json_response``: see :func:`http_app`); an identity provider's keys are kept
    fresh meanwhile.

    Started (``await tasks.start(...)``) once it listens, with the port it listens
    on: port 0 has the system choose one. Raises :class:`ListenError` when the
    address cannot be listened on.
    """
    try:
        listener = bind(host, port)
    except OSError as exc:
        raise ListenError(cannot_listen(host, port, exc)) from None
    gate = authenticator_of(authenticator)
    config = uvicorn.Config(
        http_app(server, gate, host=host, json_response=json_response),
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
        async with gate, anyio.create_task_group() as tasks:
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
