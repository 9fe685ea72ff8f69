"""A state store stopped under a gateway, an MCP HTTP door and an agent service, and started again.

The broker stays up (a nats-server of its own); the store (a second
nats-server's key-value bucket, or Redis) is stopped with SIGTERM while each
door holds a session it opened before, and started again with its data. While
it is away:

* the gateway answers what needs the store ``503`` with its JSON error and a
  ``Retry-After`` (at once, once it knows), and serves what does not (a call
  outside a session); ``/readyz`` is ``503`` naming the store; ``/healthz`` stays ``200``;
* the MCP HTTP door answers a tool call ``503`` with a JSON-RPC error and a
  ``Retry-After`` too;
* the agent service answers a request with an ``unavailable`` error event;

each promptly, and no door ends or logs a traceback. Once the store is back,
each door's session goes on where it was (its state kept) without restarting
anything; the time that takes goes to the report.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
import pytest
from mcp.shared.exceptions import MCPError

from tests.doors.processes import DoorProcess, door_process
from tests.faults import report
from tests.faults.report import StoreFigures
from tests.mcp.support import http_client
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from tests.support.servers import Restartable
from toolbus import connect
from toolbus.application.agent.client import AgentClient
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus_mcp.serving.server import STORE_UNAVAILABLE

T = TypeVar("T")

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow, pytest.mark.timeout(300)]

#: Seconds each store request waits for its engine (the stores' ``timeout``; 5 by default).
STORE_TIMEOUT = 2.0
#: How long the store stays away.
OUTAGE = 3.0
#: What a door may take to answer while the store is away (the stores' own
#: timeouts are 5 s by default).
ANSWER_LIMIT = 10.0
#: Seconds after the store is back within which every door serves again.
RECOVERY_LIMIT = 30.0
MCP = ("mcp", "serve", "--transport", "http", "--sign-key", "env:SIGN_KEY")
GATE = {"Toolbus-Groups": ",".join(GROUPS)}


@dataclass
class Store:
    kind: str
    url: str
    options: dict[str, object]
    server: Restartable


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[str]:
    server = NatsServer(tmp_path / "broker")
    (tmp_path / "broker").mkdir()
    with server.running():
        yield server.url


@pytest.fixture(params=["nats", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    workdir = tmp_path / "store"
    workdir.mkdir()
    server: NatsServer | RedisServer
    if request.param == "nats":
        server = NatsServer(workdir)
        options: dict[str, object] = {"bucket": "toolbus-faults", "timeout": STORE_TIMEOUT}
    else:
        server = RedisServer(workdir)
        options = {"prefix": "toolbus-faults", "timeout": STORE_TIMEOUT}
    with Restartable(server.running) as running:
        yield Store(request.param, server.url, options, running)


def script(path: Path) -> str:
    """The agent's scripted model: step in (first request), then work (second)."""
    turns = [
        {"calls": [{"name": "step-in", "arguments": {"n": 100}}]},
        {"text": "Stepped in."},
        {"calls": [{"name": "work", "arguments": {"n": 101}}]},
        {"text": "Worked."},
    ]
    path.write_text(json.dumps(turns))
    return f"scripted://{path}"


@asynccontextmanager
async def agent_door(deployment: Deployment, llm: str) -> AsyncIterator[DoorProcess]:
    argv = ["agent", "serve", "--config", str(deployment.config), "--llm", llm]
    async with door_process(
        argv, cwd=deployment.workdir, environment=deployment.environment, ready="serving agent"
    ) as process:
        yield process


async def ask(agents: AgentClient, request: AgentRequest) -> list[AgentEvent]:
    return [event async for event in agents.ask(request, timeout=ANSWER_LIMIT)]


async def until_served(attempt: Callable[[], Awaitable[bool]], since: float) -> float:
    """Seconds from ``since`` until ``attempt()`` succeeds (tried every 0.2 s)."""
    with anyio.fail_after(RECOVERY_LIMIT):
        while True:
            if await attempt():
                return time.monotonic() - since
            await anyio.sleep(0.2)  # the pace of trying


async def timed(work: Awaitable[T]) -> tuple[T, float]:
    started = time.monotonic()
    with anyio.fail_after(ANSWER_LIMIT):
        result = await work
    return result, time.monotonic() - started


async def test_doors_answer_while_their_store_is_away_and_resume_after(
    broker: str, store: Store, tmp_path: Path
) -> None:
    (tmp_path / "doors").mkdir()
    deployment = Deployment(tmp_path / "doors", broker, store.url, store.options)
    #: How each door answered while the store was away, and the longest it took.
    answers: dict[str, Counter[str]] = {"gateway": Counter(), "mcp": Counter(), "agent": Counter()}
    slowest: Counter[str] = Counter()
    recovered: dict[str, float] = {}
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        gateway, gateway_port = await stack.enter_async_context(deployment.door("gateway"))
        mcp, mcp_port = await stack.enter_async_context(deployment.door(*MCP))
        agent = await stack.enter_async_context(
            agent_door(deployment, script(tmp_path / "script.json"))
        )
        doors = {"gateway": gateway, "mcp": mcp, "agent": agent}
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{gateway_port}",
                headers={"Authorization": f"Bearer {ALICE_KEY}"},
                timeout=30,
            )
        )
        mcp_url = f"http://127.0.0.1:{mcp_port}"
        mcp_client = await stack.enter_async_context(http_client(f"{mcp_url}/mcp", ALICE_KEY, GATE))
        bus = await connect(broker)
        stack.push_async_callback(bus.close)
        agents = await stack.enter_async_context(AgentClient(bus))

        # Before: each door opens a session and moves it from undefined to working.
        opened = await http.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text
        calls = f"/v1/sessions/{opened.json()['session_id']}/calls"
        answer = await http.post(calls, json={"name": "step-in", "arguments": {"n": 1}})
        assert answer.status_code == 200, answer.text
        result = await mcp_client.call_tool("step-in", {"n": 2})
        assert not result.is_error, result.content
        events = await ask(agents, AgentRequest(question="step in", user="alice", group=GROUPS))
        assert events[-1].chunk_type == "answer", events
        conversation = events[-1].session
        assert conversation is not None

        await store.server.stop()

        # The gateway: the session call, readiness, liveness.
        answer, slowest["gateway"] = await timed(
            http.post(calls, json={"name": "work", "arguments": {"n": 3}})
        )
        answers["gateway"][str(answer.status_code)] += 1
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"].isdigit()
        assert answer.json()["error"] == "unavailable" and answer.json()["down"] == "state"
        # Known to be away now: the next is answered at once, not after the store's timeout.
        again, took = await timed(http.post(calls, json={"name": "work", "arguments": {"n": 3}}))
        answers["gateway"][str(again.status_code)] += 1
        assert again.status_code == 503 and took < STORE_TIMEOUT, (again.text, took)
        one_off, _ = await timed(
            http.post("/v1/tools/step-in/call", json={"arguments": {"n": 7}, "groups": GROUPS})
        )
        assert one_off.status_code == 200, one_off.text  # a call outside a session needs no store
        ready = await http.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["state"] != "ok", ready.text
        assert (await http.get("/healthz")).status_code == 200
        # The MCP door: the first call finds the store away (a JSON-RPC error saying when
        # to try again); the next request is answered 503 before it reaches MCP.
        started = time.monotonic()
        with pytest.raises(MCPError) as refused:
            await timed(mcp_client.call_tool("work", {"n": 4}))
        slowest["mcp"] = time.monotonic() - started
        answers["mcp"][f"JSON-RPC {refused.value.error.code}"] += 1
        assert refused.value.error.code == STORE_UNAVAILABLE, refused.value
        assert refused.value.error.data["retry_after"] > 0
        async with httpx.AsyncClient(base_url=mcp_url, timeout=30) as raw:
            listed, took = await timed(
                raw.post(
                    "/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={
                        "Authorization": f"Bearer {ALICE_KEY}",
                        "Accept": "application/json, text/event-stream",
                        **GATE,
                    },
                )
            )
            answers["mcp"][str(listed.status_code)] += 1
            slowest["mcp"] = max(slowest["mcp"], took)
            assert listed.status_code == 503, listed.text
            assert listed.headers["retry-after"].isdigit()
            assert listed.json()["error"]["code"] == STORE_UNAVAILABLE
            ready = await raw.get("/readyz")
            assert ready.status_code == 503 and ready.json()["checks"]["state"] != "ok"
            assert (await raw.get("/healthz")).status_code == 200
        # The agent service: the conversation's next request.
        asked = AgentRequest(question="step in", user="alice", group=GROUPS, session=conversation)
        events, slowest["agent"] = await timed(ask(agents, asked))
        answers["agent"][str(events[-1].error and events[-1].error.type)] += 1
        assert events[-1].error is not None and events[-1].error.type == "unavailable", events

        await anyio.sleep(OUTAGE)  # the outage is the scenario, not a wait for an event
        await store.server.start()
        back = time.monotonic()

        async def gateway_works() -> bool:
            answer = await http.post(calls, json={"name": "work", "arguments": {"n": 5}})
            if answer.status_code != 200:
                return False
            assert answer.json()["state"] == "working", answer.json()  # the session resumed
            return True

        async def mcp_works() -> bool:
            try:
                result = await mcp_client.call_tool("work", {"n": 6})
            except (MCPError, httpx.HTTPStatusError):
                return False
            # "work" is offered only in "working": the workflow resumed where it was.
            assert not result.is_error, result.content
            return True

        async def agent_works() -> bool:
            events = await ask(agents, asked)
            if events[-1].chunk_type != "answer":
                return False
            assert events[-1].state == "working", events  # it went on from step-in
            return True

        for name, works in (("gateway", gateway_works), ("mcp", mcp_works), ("agent", agent_works)):
            recovered[name] = await until_served(works, back)

        for name, door in doors.items():
            assert door.process.returncode is None, f"{name} ended:\n{door.output()[-3000:]}"
            assert "Traceback" not in door.output(), f"{name}:\n{door.output()[-6000:]}"

    assert deployment.runs[("work", 101)] == 1  # the agent's continued run called work once
    for name in doors:
        found = StoreFigures(store.kind, name, recovered[name], slowest[name], dict(answers[name]))
        report.STORE_FIGURES.append(found)
        print(f"\n{found.row()}")
