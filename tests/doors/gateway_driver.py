"""The HTTP gateway as a door: ``toolbus gateway`` (uvicorn on 127.0.0.1), called with httpx."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import httpx

from tests.doors.processes import LISTEN, door_process
from tests.support.servers import LOOPBACK
from toolbus.testing.doors import (
    DoorAnswer,
    DoorCaller,
    DoorDriver,
    DoorSession,
    DoorSetup,
    Outcome,
    api_key,
)


def _outcome(status: int, body: Any) -> Outcome:
    if status in (200, 201):
        return (
            "ok"
            if not isinstance(body, dict) or body.get("status", "ok") == "ok"
            else ("refused" if body.get("status") == "refused" else "error")
        )
    if status == 429:
        return "limited"
    if status == 403 and isinstance(body, dict) and "error" in body:
        return "denied"  # the access check (groups, state), before anything ran
    if status in (403, 404, 409):
        return "refused"  # a tool not offered, or a code hook's Deny
    return "error"


def _answer(response: httpx.Response, tools: tuple[str, ...] = ()) -> DoorAnswer:
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text
    text = ""
    if isinstance(body, dict):
        text = str(body.get("observation") or body.get("message") or "")
    return DoorAnswer(
        _outcome(response.status_code, body),
        text,
        f"{response.status_code} {response.text}",
        tools,
    )


def _sse(text: str) -> list[tuple[str, str]]:
    """(event, data) pairs of a Server-Sent-Events body."""
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        name, data = "message", []
        for line in block.split("\n"):
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
        if data or name != "message":
            events.append((name, "\n".join(data)))
    return events


class GatewayDriver(DoorDriver):
    name = "gateway"

    def __init__(self, setup: DoorSetup, url: str) -> None:
        super().__init__(setup)
        self.url = url

    def _client(self, user: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=self.url, headers={"Authorization": f"Bearer {api_key(user)}"}, timeout=60
        )

    @staticmethod
    def _body(caller: DoorCaller, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = dict(extra)
        if caller.groups is not None:
            body["groups"] = list(caller.groups)
        if caller.state is not None:
            body["state"] = caller.state
        return body

    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        params: dict[str, str] = {}
        if caller.groups is not None:
            params["groups"] = ",".join(caller.groups)
        if caller.state is not None:
            params["state"] = caller.state
        async with self._client(caller.user) as http:
            response = await http.get("/v1/tools", params=params)
        names: tuple[str, ...] = ()
        if response.status_code == 200:
            names = tuple(t["function"]["name"] for t in response.json()["tools"])
        return _answer(response, names)

    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        async with self._client(caller.user) as http:
            response = await http.post(
                f"/v1/tools/{tool}/call", json=self._body(caller, arguments=dict(arguments or {}))
            )
        return _answer(response)

    async def stream(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer | None:
        async with self._client(caller.user) as http:
            response = await http.post(
                f"/v1/tools/{tool}/stream", json=self._body(caller, arguments=dict(arguments or {}))
            )
        if response.status_code != 200:
            return _answer(response)
        events = _sse(response.text)
        chunks = "".join(data for name, data in events if name == "chunk")
        failed = [data for name, data in events if name == "error"]
        if failed:
            return DoorAnswer("error", failed[0], f"200 {response.text}")
        return DoorAnswer("ok", chunks, f"200 {response.text}")

    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        http = self._client(caller.user)
        response = await http.post("/v1/sessions", json=self._body(caller))
        if response.status_code != 201:
            await http.aclose()
            return _answer(response)
        return _GatewaySession(http, response.json()["session_id"])


class _GatewaySession(DoorSession):
    def __init__(self, http: httpx.AsyncClient, session_id: str) -> None:
        self.http = http
        self.id = session_id

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer:
        response = await self.http.post(
            f"/v1/sessions/{self.id}/calls", json={"name": tool, "arguments": dict(arguments or {})}
        )
        return _answer(response)

    async def close(self) -> None:
        try:
            await self.http.delete(f"/v1/sessions/{self.id}")
        finally:
            await self.http.aclose()


@asynccontextmanager
async def gateway_door(setup: DoorSetup, *extra: str) -> AsyncIterator[GatewayDriver]:
    args = ["gateway", *extra, *LISTEN]
    environment = setup.environment()
    async with door_process(args, cwd=setup.directory, environment=environment, http=True) as door:
        yield GatewayDriver(setup, f"http://{LOOPBACK}:{door.port}")
