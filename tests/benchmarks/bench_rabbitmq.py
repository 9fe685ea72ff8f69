"""toolbus over RabbitMQ against a raw aio-pika request/reply loop, on the same node in one run.

Contestants, each a requester and a responder on two connections in this process:

* **raw**: what an aio-pika user writes for TrustGraph-style request/reply, on
  the same topology the adapter uses: a fanout exchange per queue, the
  responders sharing one queue bound to the request exchange (manual acks,
  ``prefetch`` 64 as the adapter's default), the requester reading a queue of its
  own bound to the response exchange (no acks), an ``id`` header and a dict of
  futures. Channels without publisher confirms, as the adapter's for
  non-persistent queues. Bytes are moved, never encoded or decoded.
* **toolbus**: a ``ServiceHost`` serving an echo tool and a ``ToolServiceClient``
  calling it over the adapter, each on its own connection: JSON envelope both
  ways, ``id``, deadline and trace context as headers, bounded concurrency.

Figures: sequential p50 latency and throughput, and throughput with 64 calls
in flight. Interleaved rounds, best of each; reported as ratios toolbus / raw.
The node is Debian's rabbitmq-server, started for the run.

    uv run python tests/benchmarks/bench_rabbitmq.py [--seconds 12]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aio_pika

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.raw_exchange import best_of_interleaved
from tests.rabbitmq.server import rabbitmq_node
from toolbus.benchmark import echo_calls
from toolbus.domain.calls import wire
from toolbus_rabbitmq import RabbitMQOptions

Call = Callable[[], Awaitable[Any]]
ROUNDS = 3
IN_FLIGHT = 64
REQUEST = wire.encode_request("bench", None, {"text": "hi"})
RESPONSE = wire.encode_response("bench:hi")


async def raw_loop(url: str) -> Call:
    """The TrustGraph pattern in plain aio-pika (see the module's docstring)."""
    suffix = uuid.uuid4().hex[:8]
    responder = await aio_pika.connect_robust(url)
    requester = await aio_pika.connect_robust(url)
    serving = await responder.channel(publisher_confirms=False)
    calling = await requester.channel(publisher_confirms=False)
    await serving.set_qos(prefetch_count=RabbitMQOptions().prefetch)
    fanout = aio_pika.ExchangeType.FANOUT
    requests = await calling.declare_exchange(f"bench.request.{suffix}", fanout, durable=True)
    replies = await serving.declare_exchange(f"bench.response.{suffix}", fanout, durable=True)
    shared = await serving.declare_queue(f"bench.request.{suffix}.raw", auto_delete=True)
    await shared.bind(requests.name, routing_key="")
    own = await calling.declare_queue(exclusive=True, auto_delete=True)
    await own.bind(replies.name, routing_key="")
    waiters: dict[str, asyncio.Future[bytes]] = {}
    ids = itertools.count()

    async def respond(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        answer = aio_pika.Message(RESPONSE, headers={"id": message.headers["id"]})
        await replies.publish(answer, routing_key="", mandatory=False)
        await message.ack()

    async def resolve(message: aio_pika.abc.AbstractIncomingMessage) -> None:
        waiter = waiters.pop(str(message.headers["id"]), None)
        if waiter is not None:
            waiter.set_result(message.body)

    await shared.consume(respond)
    await own.consume(resolve, no_ack=True)
    loop = asyncio.get_running_loop()

    async def call() -> bytes:
        call_id = str(next(ids))
        waiter: asyncio.Future[bytes] = loop.create_future()
        waiters[call_id] = waiter
        request = aio_pika.Message(REQUEST, headers={"id": call_id})
        await requests.publish(request, routing_key="", mandatory=False)
        return await waiter

    return call


async def main(url: str, seconds: float) -> None:
    raw = await raw_loop(url)
    async with echo_calls(url, payload=2) as (ours, _):
        calls = {"raw aio-pika": raw, "toolbus": ours}
        for call in calls.values():  # warm up connections and caches
            for _ in range(50):
                await call()
        sequential = await best_of_interleaved(calls, 1, seconds / 2, ROUNDS)
        parallel = await best_of_interleaved(calls, IN_FLIGHT, seconds / 2, ROUNDS)
    print(f"{'contestant':<14}{'seq p50 µs':>12}{'seq calls/s':>13}{'64 in flight calls/s':>22}")
    for name in calls:
        one, many = sequential[name], parallel[name]
        print(f"{name:<14}{one.p50_us:>12,.0f}{one.throughput:>13,.0f}{many.throughput:>22,.0f}")
    raw_one, raw_many = sequential["raw aio-pika"], parallel["raw aio-pika"]
    one, many = sequential["toolbus"], parallel["toolbus"]
    print(
        f"toolbus / raw: {one.throughput / raw_one.throughput:.0%} sequentially "
        f"(p50 {one.p50_us / raw_one.p50_us:.2f}x), "
        f"{many.throughput / raw_many.throughput:.0%} at {IN_FLIGHT} in flight"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=12.0)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory(prefix="bench-rabbitmq-") as workdir,
        rabbitmq_node(Path(workdir)) as node,
    ):
        asyncio.run(main(node, args.seconds))
