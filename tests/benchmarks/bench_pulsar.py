"""Benchmark: toolbus tool calls over Pulsar against a raw pulsar-client request/reply loop.

Run it from the repository root::

    uv run python tests/benchmarks/bench_pulsar.py [--calls 20000] [--rounds 3]

It starts its own pulsar-lite server (a Pulsar-protocol-compatible server, not
Apache Pulsar) and measures, on that one server in one run:

* **raw** loops, pulsar-client with no toolbus code: a service reads a Shared
  subscription with a pool of 64 workers and answers each request with a fixed
  TrustGraph-shaped body carrying the request's ``id``; a caller sends
  requests and matches answers by ``id`` on an Exclusive subscription. Three
  variants: on pulsar-client's asyncio API; on its callback API; and on the
  callback API without waiting for send receipts.
* **adapter only**: the raw loops' exchange, but through the adapter's
  ``publish``/``subscribe``: the adapter's share of the cost.
* **toolbus**: the same exchange as tool calls, a :class:`ServiceHost` serving
  an echo service and a :class:`ToolServiceClient` calling it, both over the
  Pulsar adapter, on non-persistent topics as TrustGraph uses.

For each: sequential p50 latency and calls per second, and calls per second
with 64 calls in flight. Rounds alternate the contestants; the best round of
each is reported (the machine is shared, the best is the least disturbed), and
toolbus is compared with the best raw loop on each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import pulsar
from pulsar.asyncio import Client as AsyncClient

from tests.pulsar.server import pulsar_lite_server
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import tool_service
from toolbus.domain.calls import wire
from toolbus_pulsar import connect

IN_FLIGHT = 64
Call = Callable[[int], Awaitable[Any]]


@dataclass
class Figures:
    p50_ms: float
    sequential_per_s: float
    concurrent_per_s: float


def queues(kind: str) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:8]
    return (
        f"non-persistent://bench/request/{kind}-{tag}",
        f"non-persistent://bench/response/{kind}-{tag}",
    )


async def measure(call: Call, sequential: int, concurrent: int) -> Figures:
    for i in range(200):  # warm up: producers, subscriptions, caches
        await call(i)
    latencies = []
    started = time.perf_counter()
    for i in range(sequential):
        t0 = time.perf_counter()
        await call(i)
        latencies.append(time.perf_counter() - t0)
    sequential_s = time.perf_counter() - started

    counter = iter(range(concurrent))

    async def worker() -> None:
        for i in counter:
            await call(i)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    concurrent_s = time.perf_counter() - started
    return Figures(
        p50_ms=statistics.median(latencies) * 1000,
        sequential_per_s=sequential / sequential_s,
        concurrent_per_s=concurrent / concurrent_s,
    )


# -- raw pulsar-client -----------------------------------------------------------
#
# Three raw loops, so that toolbus is held to the best of them: one on
# pulsar-client's asyncio API; one on its callback API (a message listener, and
# send callbacks handed to the loop), which is how the adapter itself talks to
# the client; and that one again without waiting for send receipts, as the
# adapter does on non-persistent topics. All log natively at WARN, as the adapter
# does: a Python logger would cost each a GIL hand-over per debug line.


async def raw_asyncio_round(url: str, sequential: int, concurrent: int) -> Figures:
    client = AsyncClient(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    request_topic, response_topic = queues("raw")
    answer = wire.encode_response("u:hello")
    body = wire.encode_request("u", None, {"text": "hello"})
    requests = await client.subscribe(
        request_topic, "raw-service", consumer_type=pulsar.ConsumerType.Shared
    )
    replies = await client.create_producer(response_topic, batching_enabled=False)
    responses = await client.subscribe(response_topic, f"raw-caller-{uuid.uuid4().hex}")
    sender = await client.create_producer(request_topic, batching_enabled=False)
    waiting: dict[str, asyncio.Future[bytes]] = {}

    async def serve() -> None:
        while True:
            message = await requests.receive()
            await replies.send(answer, {"id": message.properties()["id"]})

    async def listen() -> None:
        while True:
            message = await responses.receive()
            future = waiting.pop(message.properties()["id"], None)
            if future is not None:
                future.set_result(message.data())

    async def call(_: int) -> bytes:
        call_id = str(uuid.uuid4())
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        waiting[call_id] = future
        await sender.send(body, {"id": call_id})
        return await future

    tasks = [asyncio.create_task(serve()) for _ in range(IN_FLIGHT)]
    tasks.append(asyncio.create_task(listen()))
    try:
        return await measure(call, sequential, concurrent)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()


#: What keeps :func:`raw_loop`'s loops alive: nothing else refers to their clients,
#: and a pulsar-client ``Client`` that is garbage-collected closes its consumers.
_kept_alive: list[Callable[[], Awaitable[None]]] = []


async def raw_loop(url: str) -> Call:
    """The confirming raw callback loop as a call, for tests/benchmarks/side_by_side.py.

    Its client and serving tasks live as long as the benchmark process.
    """
    call, stop = await _raw_callback_loop(url, confirm=True)
    _kept_alive.append(stop)
    return lambda: call(0)


async def raw_callback_round(
    url: str, sequential: int, concurrent: int, *, confirm: bool = True
) -> Figures:
    call, stop = await _raw_callback_loop(url, confirm=confirm)
    try:
        return await measure(call, sequential, concurrent)
    finally:
        await stop()


async def _raw_callback_loop(
    url: str, *, confirm: bool
) -> tuple[Callable[[int], Awaitable[bytes]], Callable[[], Awaitable[None]]]:
    loop = asyncio.get_running_loop()
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    request_topic, response_topic = queues("raw")
    answer = wire.encode_response("u:hello")
    body = wire.encode_request("u", None, {"text": "hello"})
    inbox: asyncio.Queue[pulsar.Message] = asyncio.Queue()
    waiting: dict[str, asyncio.Future[bytes]] = {}

    def answered(message: pulsar.Message) -> None:
        future = waiting.pop(message.properties()["id"], None)
        if future is not None:
            future.set_result(message.data())

    def on_request(_: pulsar.Consumer, message: pulsar.Message) -> None:
        loop.call_soon_threadsafe(inbox.put_nowait, message)

    def on_response(_: pulsar.Consumer, message: pulsar.Message) -> None:
        loop.call_soon_threadsafe(answered, message)

    def settle(future: asyncio.Future[None], result: pulsar.Result, _: object) -> None:
        loop.call_soon_threadsafe(future.set_result, None)

    def ignore(result: pulsar.Result, _: object) -> None:
        pass

    async def send(producer: pulsar.Producer, data: bytes, properties: dict[str, str]) -> None:
        if not confirm:  # fire and forget: the receipt is not waited for
            producer.send_async(data, ignore, properties=properties)
            return
        future: asyncio.Future[None] = loop.create_future()
        producer.send_async(data, functools.partial(settle, future), properties=properties)
        await future

    def setup() -> tuple[pulsar.Consumer, pulsar.Consumer, pulsar.Producer, pulsar.Producer]:
        return (
            client.subscribe(
                request_topic,
                "raw-service",
                consumer_type=pulsar.ConsumerType.Shared,
                message_listener=on_request,
            ),
            client.subscribe(
                response_topic, f"raw-caller-{uuid.uuid4().hex}", message_listener=on_response
            ),
            client.create_producer(response_topic),
            client.create_producer(request_topic),
        )

    _, _, replies, sender = await asyncio.to_thread(setup)

    async def serve() -> None:
        while True:
            message = await inbox.get()
            await send(replies, answer, {"id": message.properties()["id"]})

    async def call(_: int) -> bytes:
        call_id = str(uuid.uuid4())
        future: asyncio.Future[bytes] = loop.create_future()
        waiting[call_id] = future
        await send(sender, body, {"id": call_id})
        return await future

    tasks = [asyncio.create_task(serve()) for _ in range(IN_FLIGHT)]

    async def stop() -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(client.close)

    return call, stop


# -- toolbus -----------------------------------------------------------------------


async def toolbus_round(url: str, sequential: int, concurrent: int) -> Figures:
    request_queue, response_queue = queues("toolbus")

    @tool_service("bench-echo", request_queue=request_queue, response_queue=response_queue)
    async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        return f"{user}:{arguments.get('text', '')}"

    async with AsyncExitStack() as stack:
        service_bus = await connect(url)
        stack.push_async_callback(service_bus.close)
        client_bus = await connect(url)
        stack.push_async_callback(client_bus.close)
        await stack.enter_async_context(running(service_bus, echo, concurrency=IN_FLIGHT))
        client = await stack.enter_async_context(ToolServiceClient(client_bus))

        async def call(_: int) -> str:
            return await client.call(
                request_queue=request_queue,
                response_queue=response_queue,
                user="u",
                arguments={"text": "hello"},
            )

        return await measure(call, sequential, concurrent)


async def bus_round(url: str, sequential: int, concurrent: int) -> Figures:
    """The raw loop's exchange through the adapter's Bus, without ServiceHost and client.

    Tells the adapter's share of the cost from the core's: same bodies, same
    worker pool, but publish/subscribe on :class:`PulsarBus` instead of
    pulsar-client calls.
    """
    request_queue, response_queue = queues("bus")
    answer = wire.encode_response("u:hello")
    body = wire.encode_request("u", None, {"text": "hello"})
    service_bus, caller_bus = await connect(url), await connect(url)
    requests = aiter(await service_bus.subscribe(request_queue, group="bus-service"))
    responses = await caller_bus.subscribe(response_queue)
    waiting: dict[str, asyncio.Future[bytes]] = {}

    async def serve() -> None:
        while True:
            delivery = await anext(requests)
            await service_bus.publish(response_queue, answer, {"id": delivery.properties["id"]})
            await delivery.ack()

    async def listen() -> None:
        async for delivery in responses:
            future = waiting.pop(delivery.properties["id"], None)
            if future is not None:
                future.set_result(delivery.body)

    async def call(_: int) -> bytes:
        call_id = str(uuid.uuid4())
        future: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        waiting[call_id] = future
        await caller_bus.publish(request_queue, body, {"id": call_id})
        return await future

    tasks = [asyncio.create_task(serve()) for _ in range(IN_FLIGHT)]
    tasks.append(asyncio.create_task(listen()))
    try:
        return await measure(call, sequential, concurrent)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await caller_bus.close()
        await service_bus.close()


# -- report ------------------------------------------------------------------------

ROUNDS: dict[str, Callable[[str, int, int], Awaitable[Figures]]] = {
    "raw asyncio": raw_asyncio_round,
    "raw callbacks": raw_callback_round,
    "raw unconfirmed": functools.partial(raw_callback_round, confirm=False),
    "adapter only": bus_round,
    "toolbus": toolbus_round,
}
RAW = ("raw asyncio", "raw callbacks", "raw unconfirmed")


def best(rounds: list[Figures]) -> Figures:
    return Figures(
        p50_ms=min(r.p50_ms for r in rounds),
        sequential_per_s=max(r.sequential_per_s for r in rounds),
        concurrent_per_s=max(r.concurrent_per_s for r in rounds),
    )


def ratio(attribute: str, ours: Figures, raw: Figures) -> float:
    # For latency lower is better: invert, so that above 100% always means "better".
    if attribute == "p50_ms":
        return raw.p50_ms / ours.p50_ms
    return float(getattr(ours, attribute) / getattr(raw, attribute))


def report(results: dict[str, Figures]) -> None:
    # Held to the best raw loop on every figure.
    raw = best([results[name] for name in RAW])
    rows = [
        ("sequential p50 latency (ms)", "p50_ms"),
        ("sequential calls/s", "sequential_per_s"),
        (f"calls/s, {IN_FLIGHT} in flight", "concurrent_per_s"),
    ]
    names = list(results)
    header = "".join(f"{name:>16}" for name in names)
    print(f"{'':28}{header}{'adapter/raw':>13}{'toolbus/raw':>13}")
    for label, attribute in rows:
        values = "".join(f"{getattr(results[name], attribute):16.2f}" for name in names)
        adapter = ratio(attribute, results["adapter only"], raw)
        toolbus = ratio(attribute, results["toolbus"], raw)
        print(f"{label:28}{values}{adapter:12.0%}{toolbus:13.0%}")
    print("Ratios compare with the best raw loop on each figure (for latency raw/ours),")
    print("so that above 100% always means better than raw pulsar-client.")


async def main(calls: int, sequential: int, rounds: int) -> None:
    logging.basicConfig(level=logging.WARNING)
    with (
        tempfile.TemporaryDirectory(prefix="bench-pulsar-") as workdir,
        pulsar_lite_server(Path(workdir)) as url,
    ):
        print(f"pulsar-lite at {url}; {sequential} sequential and {calls} concurrent calls")
        figures: dict[str, list[Figures]] = {name: [] for name in ROUNDS}
        for number in range(1, rounds + 1):
            for name, run_round in ROUNDS.items():
                figures[name].append(await run_round(url, sequential, calls))
                last = figures[name][-1]
                print(
                    f"round {number} {name:14} p50 {last.p50_ms:.3f} ms, "
                    f"{last.sequential_per_s:.0f}/s sequential, "
                    f"{last.concurrent_per_s:.0f}/s with {IN_FLIGHT} in flight"
                )
        report({name: best(rounds_of) for name, rounds_of in figures.items()})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="calls with 64 in flight")
    parser.add_argument("--sequential", type=int, default=2_000, help="calls one at a time")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of each")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.calls, arguments.sequential, arguments.rounds))
