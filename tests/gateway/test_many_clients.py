"""A thousand event-stream clients come and go: the gateway keeps serving and keeps nothing."""

from __future__ import annotations

import socket

import anyio
import httpx
import pytest

from tests.gateway.support import KEYS, RunningGateway

pytestmark = pytest.mark.anyio

CLIENTS = 1000
SESSIONS = 100  # of the clients, this many follow a session of their own


async def _until(condition: object, what: str, timeout: float = 20) -> None:
    # The server notices a client has gone when its socket says so; wait for that.
    with anyio.fail_after(timeout):
        while not condition():  # type: ignore[operator]  # noqa: ASYNC110 - a count, not an event
            await anyio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize(
    "door_settings", [{"max-sessions-per-user": SESSIONS, "max-streams-per-user": CLIENTS}]
)
async def test_a_thousand_sse_clients_connect_and_leave_without_leaks(
    served: RunningGateway,
) -> None:
    gateway = served.gateway
    limits = httpx.Limits(max_connections=CLIENTS + 50, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=served.url, limits=limits, timeout=60) as http:
        alice = {"Authorization": f"Bearer {KEYS['alice']}"}
        ops = {"Authorization": f"Bearer {KEYS['ops']}"}
        sessions = [
            (await http.post("/v1/sessions", json={}, headers=alice)).json()["session_id"]
            for _ in range(SESSIONS)
        ]
        connected, leave = anyio.Event(), anyio.Event()
        count = 0
        heard_call = 0

        async def client(index: int) -> None:
            nonlocal count, heard_call
            if index < SESSIONS:
                url, sent = f"/v1/sessions/{sessions[index]}/events", alice
            else:
                url, sent = "/console/events", ops
            async with http.stream("GET", url, headers=sent) as stream:
                assert stream.status_code == 200
                lines = stream.aiter_lines()
                async for line in lines:
                    if line.startswith("event:"):
                        break
                count += 1
                if count == CLIENTS:
                    connected.set()
                if index < SESSIONS:
                    async for line in lines:
                        if line == "event: call":
                            heard_call += 1
                            break
                await leave.wait()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tasks:
                for index in range(CLIENTS):
                    tasks.start_soon(client, index)
                await connected.wait()
                assert gateway.open_streams == CLIENTS
                assert len(gateway.console) == CLIENTS - SESSIONS
                # While they are all connected, the gateway still answers.
                assert (await http.get("/healthz")).status_code == 200
                for sid in sessions:
                    answer = await http.post(
                        f"/v1/sessions/{sid}/calls", json={"name": "echo"}, headers=alice
                    )
                    assert answer.json()["status"] == "ok"
                await _until(lambda: heard_call == SESSIONS, "every session stream heard its call")
                leave.set()

        await _until(lambda: gateway.open_streams == 0, "streams closed")
        await _until(lambda: len(gateway.console) == 0, "console subscriptions ended")
        for sid in sessions:
            assert (await http.delete(f"/v1/sessions/{sid}", headers=alice)).status_code == 200
        assert gateway.held_sessions() == 0
        answer = await http.post(
            "/v1/tools/echo/call", json={"arguments": {"text": "still"}}, headers=alice
        )
        assert answer.json()["observation"] == "still"


async def test_a_client_that_never_finishes_its_request_holds_up_nobody(
    served: RunningGateway,
) -> None:
    host, port = served.url.removeprefix("http://").split(":")
    async with await anyio.connect_tcp(host, int(port)) as stalled:
        await stalled.send(b"POST /v1/tools/echo/call HTTP/1.1\r\nHost: gateway\r\nContent-Le")
        async with served.client("alice") as http:
            answer = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
    assert answer.json()["observation"] == "hi"


@pytest.mark.parametrize("gateway_settings", [{"stream-send-timeout": 0.5}])
async def test_an_event_stream_client_that_stops_reading_is_dropped(
    served: RunningGateway,
) -> None:
    gateway = served.gateway
    async with served.client("alice") as http:
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        host, port = served.url.removeprefix("http://").split(":")
        with socket.socket() as stalled:
            # A small receive window, so that the server's writes block soon.
            stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            await anyio.to_thread.run_sync(stalled.connect, (host, int(port)))
            request = (
                f"GET /v1/sessions/{sid}/events HTTP/1.1\r\nHost: gateway\r\n"
                f"Authorization: Bearer {KEYS['alice']}\r\n\r\n"
            )
            await anyio.to_thread.run_sync(stalled.sendall, request.encode())
            await _until(lambda: gateway.open_streams == 1, "the stream is open")
            # Each call's event carries its 512 KB observation to a client that reads nothing.
            big = {"name": "echo", "arguments": {"text": "x" * 512 * 1024}}
            for _ in range(24):
                answer = await http.post(f"/v1/sessions/{sid}/calls", json=big)
                assert answer.json()["status"] == "ok"
            await _until(lambda: gateway.open_streams == 0, "the stalled stream was dropped")
        assert (await http.get("/healthz")).status_code == 200
