"""Gateway overhead: a tool call over HTTP through the gateway, against the same call
from Python on the bus, sequential and 64 in flight, as ratios measured in one run.

Run with ``uv run python tests/benchmarks/bench_gateway.py [--seconds 3] [--nats]``.
pytest does not collect it (its name does not start with ``test_``).

Contestants, each calling the same echo service:

* ``bus``: ``Tools.call`` from Python on the bus (the baseline);
* ``bus session``: a one-call ``AgentSession`` per call, which is what the
  gateway runs for each ``POST /v1/tools/{name}/call``;
* ``HTTP /healthz (no call)``: the HTTP stack alone (client, uvicorn, FastAPI),
  the floor under the next two;
* ``HTTP call``: ``POST /v1/tools/echo/call`` through the gateway (uvicorn on
  127.0.0.1, httpx keep-alive connections);
* ``HTTP session call``: ``POST /v1/sessions/{id}/calls`` in one open session
  per worker.

Everything runs in one process (broker client, gateway, HTTP client), so the
HTTP client's own cost is counted against the gateway. With ``--nats`` the bus
is a real nats-server on a free port; otherwise the in-memory bus.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.gateway.support import KEYS, authenticator, services, serving, snapshot
from toolbus import AgentSession, Tools, ToolServiceClient, load_registry, running
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

Call = Callable[[int], Awaitable[None]]
LEVELS = (1, 64)
ROUNDS = 3


async def rate(make: Callable[[int], Awaitable[Call]], in_flight: int, seconds: float) -> float:
    """Calls per second with ``in_flight`` workers, each with its own ``make(worker)`` call."""
    calls = [await make(worker) for worker in range(in_flight)]
    for call in calls:  # warm up
        await call(0)
    done = 0
    deadline = time.perf_counter() + seconds

    async def worker(call: Call) -> None:
        nonlocal done
        n = 0
        while time.perf_counter() < deadline:
            await call(n)
            n += 1
            done += 1

    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for call in calls:
            tasks.start_soon(worker, call)
    return done / (time.perf_counter() - start)


async def measure(seconds: float, use_nats: bool) -> list[tuple[str, int, float]]:
    results: list[tuple[str, int, float]] = []
    with ExitStack() as sync_stack, tempfile.TemporaryDirectory() as scratch:
        if use_nats:
            from tests.nats.server import NatsServer

            server = NatsServer(Path(scratch))
            sync_stack.enter_context(server.running())
            url = server.url
        else:
            url = "memory://bench-gateway"
        async with AsyncExitStack() as stack:
            tools_services = services()
            config = snapshot(*tools_services)
            service_bus = await connect(url)
            stack.push_async_callback(service_bus.close)
            await stack.enter_async_context(running(service_bus, *tools_services))
            client_bus = await connect(url)
            stack.push_async_callback(client_bus.close)
            client = await stack.enter_async_context(ToolServiceClient(client_bus))
            tools = Tools(client, load_registry(config))
            metrics = ToolbusMetrics.disabled()
            gateway = Gateway(
                url,
                authenticator=authenticator(),
                config=config,
                settings=parse_gateway_settings({}),
                settings_file={"doors": {"max-sessions-per-user": 1000}},
            )
            served = await stack.enter_async_context(serving(gateway))
            limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
            http = await stack.enter_async_context(
                httpx.AsyncClient(
                    base_url=served.url,
                    limits=limits,
                    timeout=30,
                    headers={"Authorization": f"Bearer {KEYS['alice']}"},
                )
            )

            async def bus(worker: int) -> Call:
                async def call(n: int) -> None:
                    await tools.call("echo", {"text": "x"}, user="alice")

                return call

            async def bus_session(worker: int) -> Call:
                async def call(n: int) -> None:
                    async with AgentSession(
                        tools, user="alice", audit=ListAuditSink(), metrics=metrics
                    ) as session:
                        await session.call("echo", {"text": "x"})

                return call

            async def http_call(worker: int) -> Call:
                async def call(n: int) -> None:
                    answer = await http.post(
                        "/v1/tools/echo/call", json={"arguments": {"text": "x"}}
                    )
                    assert answer.status_code == 200, answer.text

                return call

            async def http_floor(worker: int) -> Call:
                async def call(n: int) -> None:
                    answer = await http.get("/healthz")
                    assert answer.status_code == 200

                return call

            async def http_session(worker: int) -> Call:
                opened = await http.post("/v1/sessions", json={})
                sid = opened.json()["session_id"]

                async def call(n: int) -> None:
                    answer = await http.post(
                        f"/v1/sessions/{sid}/calls",
                        json={"name": "echo", "arguments": {"text": "x"}},
                    )
                    assert answer.json()["status"] == "ok", answer.text

                return call

            contestants: list[tuple[str, Callable[[int], Awaitable[Call]]]] = [
                ("bus", bus),
                ("bus session", bus_session),
                ("HTTP /healthz (no call)", http_floor),
                ("HTTP call", http_call),
                ("HTTP session call", http_session),
            ]
            # Rounds interleave the contestants, so that a busy moment on a shared
            # machine lands on all of them; each figure is the median of its rounds.
            for in_flight in LEVELS:
                rounds: dict[str, list[float]] = {name: [] for name, _ in contestants}
                for _ in range(ROUNDS):
                    for name, make in contestants:
                        rounds[name].append(await rate(make, in_flight, seconds / ROUNDS))
                for name, _ in contestants:
                    results.append((name, in_flight, statistics.median(rounds[name])))
    return results


def report(results: list[tuple[str, int, float]], broker: str) -> str:
    lines = [
        f"gateway overhead on {broker} (one process; ratios against 'bus' at the same level)",
        "",
        "| contestant | in flight | calls/s | vs bus |",
        "|---|---:|---:|---:|",
    ]
    baseline: dict[int, float] = {n: r for name, n, r in results if name == "bus"}
    for name, in_flight, per_second in results:
        ratio = per_second / baseline[in_flight]
        lines.append(f"| {name} | {in_flight} | {per_second:,.0f} | {ratio:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--seconds", type=float, default=6.0, help="per contestant and level, over all rounds"
    )
    parser.add_argument("--nats", action="store_true", help="on a real nats-server")
    args = parser.parse_args(argv)
    results = anyio.run(measure, args.seconds, args.nats, backend="asyncio")
    print(report(results, "NATS" if args.nats else "the in-memory bus"))


if __name__ == "__main__":
    main()
