"""``toolbus mcp serve`` as a door: the official SDK client over stdio and streamable HTTP."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import httpx2
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from tests.doors.processes import LISTEN, TOOLBUS, door_environment, door_process
from tests.support.servers import LOOPBACK
from toolbus.testing.doors import (
    DoorAnswer,
    DoorCaller,
    DoorDriver,
    DoorSession,
    DoorSetup,
    api_key,
)

WORKFLOW = "dev.toolbus/workflow"


def _result(result: Any) -> DoorAnswer:
    texts = [getattr(block, "text", "") for block in result.content]
    text = "\n".join(texts)
    outcome = "ok"
    if result.is_error:
        outcome = "error" if text.startswith("Error:") else "refused"
    wire = json.dumps({"isError": bool(result.is_error), "content": texts})
    return DoorAnswer(outcome, text, wire)  # type: ignore[arg-type]


def _failure(exc: BaseException) -> DoorAnswer:
    """A request the door refused before MCP answered it (an HTTP status, a process that quit)."""
    text = f"{type(exc).__name__}: {exc}"
    for inner in getattr(exc, "exceptions", ()):
        text += f" / {type(inner).__name__}: {inner}"
    if "429" in text or "too many" in text.lower():
        return DoorAnswer("limited", text, text)
    return DoorAnswer("denied", text, text)


class _McpSession(DoorSession):
    """A named workflow; MCP has no way to end one, so closing leaves it to expire."""

    def __init__(self, client: Client, key: str) -> None:
        self.client = client
        self.meta = {WORKFLOW: key}

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer:
        try:
            result = await self.client.call_tool(tool, dict(arguments or {}), meta=self.meta)
        except Exception as exc:
            return _failure(exc)
        return _result(result)

    async def close(self) -> None:
        return None


class McpDriver(DoorDriver):
    """Calls through an SDK client per caller; subclasses say how a client connects."""

    def __init__(self, setup: DoorSetup) -> None:
        super().__init__(setup)
        self._stack = AsyncExitStack()
        self._clients: dict[DoorCaller, Client | DoorAnswer] = {}

    async def aclose(self) -> None:
        await self._stack.aclose()

    def _connect(self, caller: DoorCaller) -> Client:
        raise NotImplementedError

    async def _client(self, caller: DoorCaller) -> Client | DoorAnswer:
        """One client per caller, kept for the class (a process per caller over stdio)."""
        if caller in self._clients:
            return self._clients[caller]
        try:
            found: Client | DoorAnswer = await self._stack.enter_async_context(
                self._connect(caller)
            )
        except Exception as exc:
            found = _failure(exc)
        self._clients[caller] = found
        return found

    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        client = await self._client(caller)
        if isinstance(client, DoorAnswer):
            return client
        try:
            listed = await client.list_tools()
        except Exception as exc:
            return _failure(exc)
        names = tuple(sorted(tool.name for tool in listed.tools))
        return DoorAnswer("ok", ", ".join(names), json.dumps(names), names)

    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        client = await self._client(caller)
        if isinstance(client, DoorAnswer):
            return client
        try:
            return _result(await client.call_tool(tool, dict(arguments or {})))
        except Exception as exc:
            return _failure(exc)

    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        """A workflow of its own, on the caller's client: named in ``_meta``."""
        client = await self._client(caller)
        if isinstance(client, DoorAnswer):
            return client
        session = _McpSession(client, uuid.uuid4().hex)
        try:
            # A workflow starts on its first request: a limit refuses it here.
            await client.list_tools(meta=session.meta)
        except Exception as exc:
            return _failure(exc)
        return session


class McpStdioDriver(McpDriver):
    """One ``toolbus mcp serve --transport stdio`` process per caller (user, groups, state)."""

    name = "mcp-stdio"

    def _connect(self, caller: DoorCaller) -> Client:
        args = ["mcp", "serve", "--transport", "stdio", "--config", "config.json", "--no-live"]
        args += ["--user", caller.user]
        for group in caller.groups or ():
            args += ["--group", group]
        if caller.state is not None:
            args += ["--state", caller.state]
        parameters = StdioServerParameters(
            command=TOOLBUS,
            args=args,
            env=door_environment(self.setup.environment()),
            cwd=self.setup.directory,
        )
        return Client(parameters, read_timeout_seconds=60, cache=None)


class McpHttpDriver(McpDriver):
    """``toolbus mcp serve --transport http``: the caller's key, groups and state in headers."""

    name = "mcp-http"

    def __init__(self, setup: DoorSetup, url: str) -> None:
        super().__init__(setup)
        self.url = url

    @asynccontextmanager
    async def _http_client(self, caller: DoorCaller) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {api_key(caller.user)}"}
        if caller.groups is not None:
            headers["Toolbus-Groups"] = ",".join(caller.groups)
        if caller.state is not None:
            headers["Toolbus-State"] = caller.state
        async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
            transport = streamable_http_client(self.url, http_client=http)
            async with Client(transport, read_timeout_seconds=60, cache=None) as client:
                yield client

    def _connect(self, caller: DoorCaller) -> Any:
        return self._http_client(caller)


@asynccontextmanager
async def mcp_stdio_door(setup: DoorSetup) -> AsyncIterator[McpStdioDriver]:
    driver = McpStdioDriver(setup)
    try:
        yield driver
    finally:
        await driver.aclose()


@asynccontextmanager
async def mcp_http_door(setup: DoorSetup, *extra: str) -> AsyncIterator[McpHttpDriver]:
    args = ["mcp", "serve", "--transport", "http", "--config", "config.json", "--no-live", *extra]
    environment = setup.environment()
    async with door_process(
        [*args, *LISTEN], cwd=setup.directory, environment=environment, http=True
    ) as door:
        driver = McpHttpDriver(setup, f"http://{LOOPBACK}:{door.port}/mcp")
        try:
            yield driver
        finally:
            await driver.aclose()
