"""Large arguments and answers: toolbus against the raw client moving the same bytes.

Arguments and answers of 1 KB, 64 KB and 1 MB: an echo tool answers with the
text it was given. The text is prose with quotes and line ends, as tool
arguments and answers usually are, so the JSON string escaping the envelope
needs (twice for arguments: a JSON string inside a JSON body) is paid as in
production; ``--plain`` uses letters only. The raw contestant
(``raw_exchange.py``) moves the very request and response bytes toolbus sends.
Figures: MB/s of payload each way, sequentially and with 8 calls in flight,
best of interleaved rounds.

    uv run python tests/benchmarks/bench_payloads.py [--brokers memory,nats,pulsar,kafka]
        [--seconds 6]
        [--plain] [--loop asyncio|uvloop|auto] [--json results/payloads.json]
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
SIZES = (1024, 64 * 1024, 1024 * 1024)
LEVELS = (1, 8)
ROUNDS = 3
PROSE = 'The "quick" brown fox jumps over the lazy dog.\n'


def payload(size: int, plain: bool) -> str:
    unit = "x" if plain else PROSE
    return (unit * (size // len(unit) + 1))[:size]


@asynccontextmanager
async def toolbus_echo(url: str, text: str) -> AsyncIterator[Call]:
    """An echo tool and a client, each on its own connection."""
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"bench-payload-{suffix}",
        request_queue=f"non-persistent://toolbus/bench/payload-request-{suffix}",
        response_queue=f"non-persistent://toolbus/bench/payload-response-{suffix}",
    )
    async def echo(text: str) -> str:
        return text

    server_bus, client_bus = await connect(url), await connect(url)
    try:
        async with running(server_bus, echo), ToolServiceClient(client_bus) as client:

            async def call() -> str:
                answer = await client.call(
                    request_queue=echo.request_queue,
                    response_queue=echo.response_queue,
                    user="bench",
                    arguments={"text": text},
                )
                assert len(answer) == len(text)
                return answer

            yield call
    finally:
        await client_bus.close()
        await server_bus.close()


async def contest(broker: str, url: str, seconds: float, plain: bool) -> list[dict[str, Any]]:
    rows = []
    for size in SIZES:
        text = payload(size, plain)
        request = wire.encode_request("bench", None, {"text": text})
        response = wire.encode_response(text)
        async with (
            raw_exchange(broker, url, request, [response]) as raw,
            toolbus_echo(url, text) as ours,
        ):
            calls = {"raw": raw, "toolbus": ours}
            for call in calls.values():
                for _ in range(5):
                    await call()
            for level in LEVELS:
                best = await best_of_interleaved(calls, level, seconds, ROUNDS)
                row: dict[str, Any] = {
                    "broker": broker,
                    "bytes": size,
                    "request_bytes": len(request),
                    "response_bytes": len(response),
                    "in_flight": level,
                    "text": "plain" if plain else "prose",
                }
                for name, figure in best.items():
                    row[name] = {**figure.as_dict(), "mb_per_s": figure.throughput * size / 1e6}
                row["ratio"] = row["toolbus"]["mb_per_s"] / row["raw"]["mb_per_s"]
                rows.append(row)
                print(describe(row), file=sys.stderr)
    return rows


def describe(row: dict[str, Any]) -> str:
    size = row["bytes"]
    shown = f"{size // 2**20} MB" if size >= 2**20 else f"{size // 1024} KB"
    return (
        f"{row['broker']:>6}  {shown:>5} {row['text']}  {row['in_flight']:>2} in flight  "
        f"raw {row['raw']['mb_per_s']:>8,.1f} MB/s  "
        f"toolbus {row['toolbus']['mb_per_s']:>8,.1f} MB/s  {row['ratio']:.0%}  "
        f"(toolbus p50 {row['toolbus']['p50_us']:,.0f} µs, raw {row['raw']['p50_us']:,.0f} µs)"
    )


if __name__ == "__main__":
    parser = arguments(__doc__.splitlines()[0])
    parser.add_argument("--plain", action="store_true", help="letters only: no escaping")
    args = parser.parse_args()
    run(
        "payloads",
        args,
        lambda broker, url: contest(broker, url, args.seconds, args.plain),
        describe,
    )
