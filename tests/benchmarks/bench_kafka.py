"""toolbus over Kafka against a raw aiokafka request/reply loop, on the same broker in one run.

Raw: what an aiokafka user writes for request/reply. The requester produces a
request with an ``id`` header and waits on a future that a reader task resolves
from the response topic (a consumer assigned every partition, positioned at the
end). The responder is a consumer-group member that reads a batch, produces one
reply per request (headers copied, same partition rule) and waits for the
broker to take them. Same request and response bytes as a tool call, same
producer settings (``acks``, linger 0, no idempotence) and the same fetch
settings: ``fetch_max_wait_ms`` 10 for both consumers, as the test suite uses
on Tansu (which answers a waiting fetch only when its wait is over), unless
given on the command line.

toolbus: a ``ServiceHost`` serving an echo tool and a ``ToolServiceClient``
calling it over the Kafka adapter, each on its own connection: JSON envelope
both ways, ``id``, deadline and trace context as headers, a consumer group
(non-persistent queues, TrustGraph's default: offsets committed on receipt),
bounded concurrency.

Both contestants share this process and one Tansu broker. Reported as ratios
toolbus / raw.

    uv run python tests/benchmarks/bench_kafka.py [--seconds 20]
        [--fanout-fetch-max-wait-ms N] [--group-fetch-max-wait-ms N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.kafka.broker import TANSU_OPTIONS, tansu_broker
from toolbus import ToolServiceClient, running, tool_service
from toolbus.domain.calls import wire
from toolbus_kafka import KafkaOptions, connect, parse_options

Call = Callable[[], Awaitable[Any]]
ROUNDS = 3
IN_FLIGHT = 64
PARTITIONS = KafkaOptions().partitions
#: Answers' topics, as the adapter makes them.
RESPONSE_PARTITIONS = KafkaOptions().response_partitions


async def throughput(call: Call, in_flight: int, seconds: float) -> float:
    """Calls per second with ``in_flight`` calls outstanding at all times."""
    done = 0
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await call()
            done += 1

    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return done / (time.perf_counter() - begin)


async def latency(call: Call, seconds: float) -> float:
    """Median latency (µs) of one call at a time."""
    samples: list[float] = []
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


class RawRequestReply:
    """A plain aiokafka requester and responder."""

    def __init__(
        self, bootstrap: str, options: KafkaOptions, request_body: bytes, response_body: bytes
    ) -> None:
        suffix = uuid.uuid4().hex[:8]
        self.bootstrap = bootstrap
        self.request_topic = f"bench.raw.request-{suffix}"
        self.response_topic = f"bench.raw.response-{suffix}"
        self.request_body = request_body
        self.response_body = response_body
        producer = {"acks": options.acks_setting, "linger_ms": 0, "enable_idempotence": False}
        self.requester = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer)
        self.replier = AIOKafkaProducer(bootstrap_servers=bootstrap, **producer)
        self.replies = AIOKafkaConsumer(
            bootstrap_servers=bootstrap,
            enable_auto_commit=False,
            fetch_max_wait_ms=options.fanout_fetch_max_wait_ms,
        )
        self.requests = AIOKafkaConsumer(
            self.request_topic,
            bootstrap_servers=bootstrap,
            group_id=f"bench-raw-{suffix}",
            fetch_max_wait_ms=options.group_fetch_max_wait_ms,
            session_timeout_ms=options.session_timeout_ms,
            heartbeat_interval_ms=options.heartbeat_interval_ms,
        )
        self.waiting: dict[str, asyncio.Future[bytes]] = {}
        self.tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        await admin.create_topics(
            [
                NewTopic(self.request_topic, PARTITIONS, 1),
                NewTopic(self.response_topic, RESPONSE_PARTITIONS, 1),
            ]
        )
        await admin.close()
        for client in (self.requester, self.replier, self.replies, self.requests):
            await client.start()
        partitions = [TopicPartition(self.response_topic, p) for p in range(RESPONSE_PARTITIONS)]
        self.replies.assign(partitions)
        await self.replies.seek_to_end(*partitions)
        # A new group starts at the end: resolve that now, or the first request
        # could be published before the position and be skipped.
        for partition in self.requests.assignment():
            await self.requests.position(partition)
        self.tasks = [asyncio.create_task(self.respond()), asyncio.create_task(self.read())]

    async def respond(self) -> None:
        while True:
            batches = await self.requests.getmany(timeout_ms=1000)
            sent = []
            for records in batches.values():
                for record in records:
                    call_id = dict(record.headers)["id"]
                    partition = zlib.crc32(call_id) % RESPONSE_PARTITIONS
                    sent.append(
                        await self.replier.send(
                            self.response_topic,
                            self.response_body,
                            partition=partition,
                            headers=list(record.headers),
                        )
                    )
            await asyncio.gather(*sent)

    async def read(self) -> None:
        while True:
            batches = await self.replies.getmany(timeout_ms=1000)
            for records in batches.values():
                for record in records:
                    waiter = self.waiting.pop(dict(record.headers)["id"].decode(), None)
                    if waiter is not None and not waiter.done():
                        waiter.set_result(record.value)

    async def call(self) -> bytes:
        call_id = str(uuid.uuid4())
        waiter: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.waiting[call_id] = waiter
        await self.requester.send_and_wait(
            self.request_topic, self.request_body, headers=[("id", call_id.encode())]
        )
        return await waiter

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for client in (self.requests, self.replies):
            await client.stop()
        for producer in (self.requester, self.replier):
            await producer.stop()


async def main(seconds: float, fetch_settings: str) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="bench-kafka-") as workdir,
        tansu_broker(Path(workdir)) as bootstrap,
    ):
        await compare(f"kafka://{bootstrap}?{TANSU_OPTIONS}{fetch_settings}", seconds)


async def raw_loop(url: str) -> Call:
    """The raw aiokafka loop as a call, for tests/benchmarks/side_by_side.py.

    Its clients live as long as the benchmark process.
    """
    options = parse_options(url)
    raw = RawRequestReply(
        options.bootstrap_servers[0],
        options,
        wire.encode_request("bench", None, {"text": "hi"}),
        wire.encode_response("bench:hi"),
    )
    await raw.start()
    return raw.call


async def compare(url: str, seconds: float) -> None:
    options = parse_options(url)
    bootstrap = options.bootstrap_servers[0]
    request_body = wire.encode_request("bench", None, {"text": "hi"})
    response_body = wire.encode_response("bench:hi")
    raw = RawRequestReply(bootstrap, options, request_body, response_body)
    await raw.start()

    suffix = uuid.uuid4().hex[:6]

    @tool_service(
        f"bench-echo-{suffix}",
        request_queue=f"non-persistent://bench/request/echo-{suffix}",
        response_queue=f"non-persistent://bench/response/echo-{suffix}",
    )
    async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        return f"{user}:{arguments.get('text', '')}"

    service_bus, client_bus = await connect(url), await connect(url)
    async with (
        running(service_bus, echo, concurrency=IN_FLIGHT),
        ToolServiceClient(client_bus) as client,
    ):

        async def toolbus_call() -> str:
            return await client.call(
                request_queue=echo.request_queue,
                response_queue=echo.response_queue,
                user="bench",
                arguments={"text": "hi"},
            )

        assert await toolbus_call() == "bench:hi"
        assert await raw.call() == response_body
        # Interleaved rounds, best of each: other load on the machine hits both
        # contestants alike, and the best round is the least disturbed.
        share = seconds / (ROUNDS * 4)
        raw_tps, our_tps, raw_p50, our_p50 = [], [], [], []
        for _ in range(ROUNDS):
            raw_tps.append(await throughput(raw.call, IN_FLIGHT, share))
            our_tps.append(await throughput(toolbus_call, IN_FLIGHT, share))
            raw_p50.append(await latency(raw.call, share))
            our_p50.append(await latency(toolbus_call, share))
        assert client.pending == 0

    await raw.stop()
    for bus in (service_bus, client_bus):
        await bus.close()

    best_raw_tps, best_our_tps = max(raw_tps), max(our_tps)
    best_raw_p50, best_our_p50 = min(raw_p50), min(our_p50)
    print(f"toolbus over Kafka (Tansu) vs raw aiokafka request/reply ({seconds:g} s in all)")
    print(
        f"fetch_max_wait_ms: fan-out (responses) {options.fanout_fetch_max_wait_ms}, "
        f"group (requests) {options.group_fetch_max_wait_ms}"
    )
    print(f"{'figure':<32} {'raw':>10} {'toolbus':>10} {'toolbus/raw':>12}")
    print(
        f"{'throughput, 64 in flight (/s)':<32} {best_raw_tps:>10,.0f} {best_our_tps:>10,.0f} "
        f"{best_our_tps / best_raw_tps:>12.0%}"
    )
    print(
        f"{'sequential p50 latency (µs)':<32} {best_raw_p50:>10,.0f} {best_our_p50:>10,.0f} "
        f"{best_our_p50 / best_raw_p50:>12.2f}x"
    )
    print("target: toolbus throughput >= 85% of raw; toolbus latency <= raw / 0.85 (1.18x)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--fanout-fetch-max-wait-ms", type=int, help="default: the adapter's")
    parser.add_argument("--group-fetch-max-wait-ms", type=int, help="default: the adapter's")
    arguments = parser.parse_args()
    overrides = ""
    for name in ("fanout_fetch_max_wait_ms", "group_fetch_max_wait_ms"):
        value = getattr(arguments, name)
        if value is not None:
            overrides += f"&{name}={value}"
    asyncio.run(main(arguments.seconds, overrides))
