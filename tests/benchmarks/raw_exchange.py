"""The raw floor for one request answered by N messages, per broker.

A requester sends ``request`` with an ``id``; a responder answers every request
with the given ``responses`` (the same bytes toolbus would send: one answer, or
a stream's chunks and its end) under the same ``id``; the call is over when
the last one arrives. Bytes are moved, never encoded or decoded: what is left
is the broker client's own cost, the least any framework can do on top of it.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

Call = Callable[[], Awaitable[Any]]


class _Waiters:
    """A dict of futures, each resolved when its call's last response arrives."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.pending: dict[str, tuple[list[bytes], asyncio.Future[list[bytes]]]] = {}
        self.ids = itertools.count()

    def open(self) -> tuple[str, asyncio.Future[list[bytes]]]:
        call_id = str(next(self.ids))
        future: asyncio.Future[list[bytes]] = asyncio.get_running_loop().create_future()
        self.pending[call_id] = ([], future)
        return call_id, future

    def arrived(self, call_id: str, body: bytes) -> None:
        entry = self.pending.get(call_id)
        if entry is None:
            return
        received, future = entry
        received.append(body)
        if len(received) == self.expected:
            del self.pending[call_id]
            future.set_result(received)


@asynccontextmanager
async def memory_exchange(request: bytes, responses: Sequence[bytes]) -> AsyncIterator[Call]:
    """Two asyncio queues and a dict of futures: the in-process floor."""
    requests: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    answers: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    waiters = _Waiters(len(responses))

    async def respond() -> None:
        while True:
            call_id, _ = await requests.get()
            for body in responses:
                answers.put_nowait((call_id, body))

    async def listen() -> None:
        while True:
            call_id, body = await answers.get()
            waiters.arrived(call_id, body)

    async def call() -> list[bytes]:
        call_id, future = waiters.open()
        requests.put_nowait((call_id, request))
        return await future

    tasks = [asyncio.create_task(respond()), asyncio.create_task(listen())]
    try:
        yield call
    finally:
        for task in tasks:
            task.cancel()


@asynccontextmanager
async def nats_exchange(
    url: str, request: bytes, responses: Sequence[bytes]
) -> AsyncIterator[Call]:
    """Plain nats-py: two subjects, an ``id`` header, callbacks on both sides."""
    import nats
    from nats.aio.msg import Msg

    responder, requester = await nats.connect(url), await nats.connect(url)
    waiters = _Waiters(len(responses))

    async def respond(msg: Msg) -> None:
        headers = {"id": msg.headers["id"]}  # type: ignore[index]
        for body in responses:
            await responder.publish("bench.exchange.response", body, headers=headers)

    async def resolve(msg: Msg) -> None:
        waiters.arrived(msg.headers["id"], msg.data)  # type: ignore[index]

    await responder.subscribe("bench.exchange.request", queue="raw", cb=respond)
    await requester.subscribe("bench.exchange.response", cb=resolve)
    await responder.flush()
    await requester.flush()

    async def call() -> list[bytes]:
        call_id, future = waiters.open()
        await requester.publish("bench.exchange.request", request, headers={"id": call_id})
        return await future

    try:
        yield call
    finally:
        await requester.close()
        await responder.close()


@asynccontextmanager
async def pulsar_exchange(
    url: str, request: bytes, responses: Sequence[bytes]
) -> AsyncIterator[Call]:
    """pulsar-client's callback API, waiting for every send receipt as toolbus does.

    The service reads a Shared subscription, the caller an Exclusive one; one
    client for both, as ``bench_pulsar.py``'s raw loop.
    """
    import functools

    import pulsar

    from tests.benchmarks.bench_pulsar import queues

    loop = asyncio.get_running_loop()
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    request_topic, response_topic = queues("exchange")
    inbox: asyncio.Queue[str] = asyncio.Queue()
    waiters = _Waiters(len(responses))

    def settle(future: asyncio.Future[None], result: Any, _: object) -> None:
        loop.call_soon_threadsafe(future.set_result, None)

    async def send(producer: Any, data: bytes, call_id: str) -> None:
        future: asyncio.Future[None] = loop.create_future()
        producer.send_async(data, functools.partial(settle, future), properties={"id": call_id})
        await future

    def on_request(_: Any, message: Any) -> None:
        loop.call_soon_threadsafe(inbox.put_nowait, message.properties()["id"])

    def on_response(_: Any, message: Any) -> None:
        loop.call_soon_threadsafe(waiters.arrived, message.properties()["id"], message.data())

    def setup() -> tuple[Any, Any]:
        client.subscribe(
            request_topic,
            "raw-service",
            consumer_type=pulsar.ConsumerType.Shared,
            message_listener=on_request,
        )
        client.subscribe(response_topic, "raw-caller", message_listener=on_response)
        return client.create_producer(response_topic), client.create_producer(request_topic)

    replies, sender = await asyncio.to_thread(setup)

    async def serve() -> None:
        while True:
            call_id = await inbox.get()
            for body in responses:
                await send(replies, body, call_id)

    async def call() -> list[bytes]:
        call_id, future = waiters.open()
        await send(sender, request, call_id)
        return await future

    tasks = [asyncio.create_task(serve()) for _ in range(64)]
    try:
        yield call
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.to_thread(client.close)


@asynccontextmanager
async def kafka_exchange(
    url: str, request: bytes, responses: Sequence[bytes]
) -> AsyncIterator[Call]:
    """Plain aiokafka, set up as the Kafka adapter sets itself up for ``url``.

    Same producer settings (``acks``, ``linger_ms``, no idempotence, the size
    limit), topics made with the adapter's partition count and
    ``max.message.bytes`` (the response topic with ``response_partitions``),
    the same fetch waits, fetch sizes and batch size, a
    consumer group on the request topic (offsets committed as often as the
    adapter commits on non-persistent queues) and a reader assigned every
    partition of the response topic, positioned at its end. Each send waits
    for the broker to take the message, as ``Bus.publish`` does, so a stream's
    chunks go out one at a time; they share a partition, picked from the
    ``id`` as the adapter picks it, so they arrive in order. 64 responder tasks
    answer requests, like a service's worker pool.
    """
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    from toolbus_kafka import parse_options
    from toolbus_kafka.security import security_kwargs

    options = parse_options(url)
    client = {**options.connection_kwargs(), **security_kwargs(options)}
    partitions = options.partitions
    answer_partitions = options.response_partitions
    # Room for headers and record-batch framing on top of the body, as the adapter allows.
    framing = 64 * 1024
    suffix = uuid.uuid4().hex[:8]
    request_topic, response_topic = f"bench.raw.request-{suffix}", f"bench.raw.response-{suffix}"

    admin = AIOKafkaAdminClient(**client)
    await admin.start()
    try:
        await admin.create_topics(
            [
                NewTopic(
                    topic,
                    count,
                    options.replication_factor,
                    topic_configs={"max.message.bytes": str(options.max_message_size)},
                )
                for topic, count in (
                    (request_topic, partitions),
                    (response_topic, answer_partitions),
                )
            ]
        )
    finally:
        await admin.close()

    def producer() -> AIOKafkaProducer:
        return AIOKafkaProducer(
            **client,
            enable_idempotence=False,
            acks=options.acks_setting,
            linger_ms=options.linger_ms,
            max_request_size=options.max_message_size + framing,
        )

    fetching = {
        "enable_auto_commit": False,
        "max_partition_fetch_bytes": max(1024 * 1024, options.max_message_size + framing),
        "max_poll_records": options.prefetch,
    }
    sender, replier = producer(), producer()
    replies = AIOKafkaConsumer(
        **client, **fetching, fetch_max_wait_ms=options.fanout_fetch_max_wait_ms
    )
    requests = AIOKafkaConsumer(
        request_topic,
        **client,
        **{**fetching, "enable_auto_commit": True},
        auto_commit_interval_ms=max(options.commit_interval_ms, 1),
        group_id=f"bench-raw-{suffix}",
        fetch_max_wait_ms=options.group_fetch_max_wait_ms,
        # A fresh topic: reading from its start skips nothing, however long the join takes.
        auto_offset_reset="earliest",
        session_timeout_ms=options.session_timeout_ms,
        heartbeat_interval_ms=options.heartbeat_interval_ms,
        rebalance_timeout_ms=options.rebalance_timeout_ms,
    )
    inbox: asyncio.Queue[bytes] = asyncio.Queue()
    waiters = _Waiters(len(responses))

    async def take() -> None:
        while True:
            batches = await requests.getmany(timeout_ms=200, max_records=options.prefetch)
            for records in batches.values():
                for record in records:
                    inbox.put_nowait(dict(record.headers)["id"])

    async def serve() -> None:
        while True:
            call_id = await inbox.get()
            partition = zlib.crc32(call_id) % answer_partitions
            headers = [("id", call_id)]
            for body in responses:
                await replier.send_and_wait(
                    response_topic, body, partition=partition, headers=headers
                )

    async def read() -> None:
        while True:
            batches = await replies.getmany(timeout_ms=200, max_records=options.prefetch)
            for records in batches.values():
                for record in records:
                    waiters.arrived(dict(record.headers)["id"].decode(), record.value)

    async def call() -> list[bytes]:
        call_id, future = waiters.open()
        key = call_id.encode()
        await sender.send_and_wait(
            request_topic,
            request,
            partition=zlib.crc32(key) % partitions,
            headers=[("id", key)],
        )
        return await future

    started: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    try:
        for part in (sender, replier, replies, requests):
            await part.start()
            started.append(part)
        assigned = [TopicPartition(response_topic, p) for p in range(answer_partitions)]
        replies.assign(assigned)
        await replies.seek_to_end(*assigned)
        tasks = [asyncio.create_task(take()), asyncio.create_task(read())]
        tasks += [asyncio.create_task(serve()) for _ in range(64)]
        yield call
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for part in reversed(started):
            await part.stop()


def raw_exchange(
    broker: str, url: str, request: bytes, responses: Sequence[bytes]
) -> Any:  # an async context manager yielding a Call
    """The raw contestant for ``broker`` (``memory``, ``nats``, ``pulsar`` or ``kafka``)."""
    if broker == "memory":
        return memory_exchange(request, responses)
    if broker == "nats":
        return nats_exchange(url, request, responses)
    if broker == "pulsar":
        return pulsar_exchange(url, request, responses)
    if broker == "kafka":
        return kafka_exchange(url, request, responses)
    raise SystemExit(f"no raw exchange for {broker!r}: choose memory, nats, pulsar or kafka")


async def best_of_interleaved(
    calls: dict[str, Call], in_flight: int, seconds: float, rounds: int
) -> dict[str, Any]:
    """Each contestant's best round: rounds alternate, so load elsewhere hits all alike."""
    from toolbus.benchmark import measure

    best: dict[str, Any] = {}
    for _ in range(rounds):
        for name, call in calls.items():
            figure = await measure(call, in_flight, seconds / rounds, grace=10.0)
            if name not in best or figure.throughput > best[name].throughput:
                best[name] = figure
    return best
