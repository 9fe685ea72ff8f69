"""toolbus on the in-memory bus against a raw asyncio request/reply loop, in one run.

The raw loop is the floor for in-process request/reply: two asyncio queues, a
dict of futures, bytes in and out, no encoding. toolbus does everything a real
call does: JSON envelope both ways, properties, ids, competing-consumer
delivery, acks, bounded concurrency. Reported as ratios toolbus / raw.

    uv run python tests/benchmarks/bench_memory.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from toolbus.benchmark import echo_calls

Call = Callable[[], Awaitable[Any]]
ROUNDS = 3


async def measure(call: Call, in_flight: int, seconds: float) -> tuple[float, float, float]:
    """Throughput (calls/s), p50 and p99 latency (µs) of ``call`` at ``in_flight``."""
    latencies: list[float] = []
    stop = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop:
            started = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - started)

    begin = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    elapsed = time.perf_counter() - begin
    quantiles = statistics.quantiles(latencies, n=100)
    return len(latencies) / elapsed, quantiles[49] * 1e6, quantiles[98] * 1e6


class RawLoop:
    """Two queues and a dict of futures: the physical floor in one process."""

    def __init__(self) -> None:
        self.requests: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.responses: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
        self.waiters: dict[str, asyncio.Future[bytes]] = {}
        self.ids = itertools.count()

    async def serve(self) -> None:
        while True:
            call_id, body = await self.requests.get()
            await self.responses.put((call_id, body))

    async def listen(self) -> None:
        while True:
            call_id, body = await self.responses.get()
            waiter = self.waiters.pop(call_id, None)
            if waiter is not None:
                waiter.set_result(body)

    async def call(self) -> bytes:
        call_id = str(next(self.ids))
        waiter = asyncio.get_running_loop().create_future()
        self.waiters[call_id] = waiter
        await self.requests.put((call_id, b'{"text": "hi"}'))
        return await waiter


async def main(seconds: float) -> None:
    raw = RawLoop()
    tasks = [asyncio.create_task(raw.serve()), asyncio.create_task(raw.listen())]

    rows = []
    async with echo_calls(f"memory://bench-{uuid.uuid4().hex}", payload=2) as (
        toolbus_call,
        client,
    ):
        for in_flight in (1, 16, 64):
            # Interleaved rounds, best of each: other load on the machine hits both
            # contestants alike, and the best round is the least disturbed.
            raw_rounds, our_rounds = [], []
            for _ in range(ROUNDS):
                raw_rounds.append(await measure(raw.call, in_flight, seconds / ROUNDS))
                our_rounds.append(await measure(toolbus_call, in_flight, seconds / ROUNDS))
            rows.append((in_flight, max(raw_rounds), max(our_rounds)))
        assert client.pending == 0
    for task in tasks:
        task.cancel()

    print(f"in-memory bus vs raw asyncio loop ({seconds:g} s per figure)")
    print(
        f"{'in flight':>9} {'raw calls/s':>12} {'toolbus calls/s':>16} {'ratio':>6} "
        f"{'raw p50 µs':>11} {'toolbus p50 µs':>15} {'toolbus p99 µs':>15}"
    )
    for in_flight, (raw_tps, raw_p50, _), (tps, p50, p99) in rows:
        print(
            f"{in_flight:>9} {raw_tps:>12,.0f} {tps:>16,.0f} {tps / raw_tps:>6.0%} "
            f"{raw_p50:>11.1f} {p50:>15.1f} {p99:>15.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(parser.parse_args().seconds))
