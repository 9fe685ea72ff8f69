"""Streamed answers: toolbus against the raw client moving the same messages, per broker.

Two streams: 100 chunks of 100 bytes, and 10 chunks of 64 KB. toolbus serves a
tool that yields the chunks and a ``ToolServiceClient.stream()`` reads them; the
raw contestant (``raw_exchange.py``) answers each request with the very bytes
toolbus sends (every chunk's response envelope, then the end of the stream) and
the requester waits for the last one. Figures: chunks per second, sequentially
and with 8 streams in flight, best of interleaved rounds.

    uv run python tests/benchmarks/bench_streams.py [--brokers memory,nats,pulsar,kafka]
        [--seconds 6]
        [--loop asyncio|uvloop|auto] [--json results/streams.json]
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.contests import arguments, run
from tests.benchmarks.raw_exchange import best_of_interleaved, raw_exchange
from toolbus import ToolServiceClient, running, tool_service
from toolbus.domain.calls import wire
from toolbus.plugins import connect

Call = Callable[[], Awaitable[Any]]
#: (chunks, bytes per chunk)
STREAMS = ((100, 100), (10, 64 * 1024))
LEVELS = (1, 8)
ROUNDS = 3


@asynccontextmanager
async def toolbus_stream(url: str, count: int, size: int) -> AsyncIterator[Call]:
    """A tool that yields ``count`` chunks of ``size`` characters, and a client reading them."""
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"bench-stream-{suffix}",
        request_queue=f"non-persistent://toolbus/bench/stream-request-{suffix}",
        response_queue=f"non-persistent://toolbus/bench/stream-response-{suffix}",
    )
    async def chunks(count: int, size: int) -> AsyncIterator[str]:
        chunk = "x" * size
        for _ in range(count):
            yield chunk

    server_bus, client_bus = await connect(url), await connect(url)
    try:
        async with running(server_bus, chunks), ToolServiceClient(client_bus) as client:

            async def call() -> int:
                received = 0
                async for _ in client.stream(
                    request_queue=chunks.request_queue,
                    response_queue=chunks.response_queue,
                    user="bench",
                    arguments={"count": count, "size": size},
                ):
                    received += 1
                assert received == count, f"{received} of {count} chunks"
                return received

            yield call
    finally:
        await client_bus.close()
        await server_bus.close()


def same_messages(count: int, size: int) -> tuple[bytes, list[bytes]]:
    """The request and response bodies toolbus moves for one stream."""
    request = wire.encode_request("bench", None, {"count": count, "size": size})
    chunk = wire.encode_response("x" * size, end_of_stream=False)
    return request, [chunk] * count + [wire.encode_response("")]


async def contest(broker: str, url: str, seconds: float) -> list[dict[str, Any]]:
    rows = []
    for count, size in STREAMS:
        request, responses = same_messages(count, size)
        async with (
            raw_exchange(broker, url, request, responses) as raw,
            toolbus_stream(url, count, size) as ours,
        ):
            calls = {"raw": raw, "toolbus": ours}
            for call in calls.values():
                for _ in range(10):
                    await call()
            for level in LEVELS:
                best = await best_of_interleaved(calls, level, seconds, ROUNDS)
                row = {"broker": broker, "chunks": count, "chunk_bytes": size, "in_flight": level}
                for name, figure in best.items():
                    row[name] = {**figure.as_dict(), "chunks_per_s": figure.throughput * count}
                row["ratio"] = row["toolbus"]["chunks_per_s"] / row["raw"]["chunks_per_s"]
                rows.append(row)
                print(describe(row), file=sys.stderr)
    return rows


def describe(row: dict[str, Any]) -> str:
    size = row["chunk_bytes"]
    shown = f"{size // 1024} KB" if size >= 1024 else f"{size} B"
    return (
        f"{row['broker']:>6}  {row['chunks']:>3} x {shown:>6}  {row['in_flight']:>2} in flight  "
        f"raw {row['raw']['chunks_per_s']:>9,.0f} chunks/s  "
        f"toolbus {row['toolbus']['chunks_per_s']:>9,.0f} chunks/s  {row['ratio']:.0%}"
    )


if __name__ == "__main__":
    args = arguments(__doc__.splitlines()[0]).parse_args()
    run("streams", args, lambda broker, url: contest(broker, url, args.seconds), describe)
