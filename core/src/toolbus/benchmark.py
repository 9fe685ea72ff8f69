"""Measuring tool calls: latency percentiles and throughput at a number of calls in flight.

Used by ``toolbus bench`` (your broker, your machine) and by the side-by-side
scripts under ``tests/benchmarks/``, so every figure is measured the same way.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from typing import Any

import anyio

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import tool_service
from toolbus.plugins import connect

Call = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Figure:
    """One measurement: ``calls`` round trips in ``seconds`` with ``in_flight`` at once."""

    in_flight: int
    calls: int
    seconds: float
    errors: int
    p50_us: float
    p99_us: float

    @property
    def throughput(self) -> float:
        return self.calls / self.seconds if self.seconds else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "throughput": round(self.throughput, 1)}


async def measure(
    call: Call,
    in_flight: int,
    seconds: float,
    *,
    progress: Callable[[int], None] | None = None,
    grace: float = 30.0,
) -> Figure:
    """Run ``call`` from ``in_flight`` concurrent workers for ``seconds``.

    Failed calls are counted, not timed. A call still unanswered ``grace``
    seconds after the measuring window is cancelled and counted as failed (a
    reply lost on an at-most-once queue must not stall the run); the watchdog
    costs nothing per call. ``progress`` is told the number of calls done so
    far, about ten times a second.
    """
    latencies: list[float] = []
    errors = 0
    finished = 0
    stop = time.perf_counter() + seconds
    clock = time.perf_counter

    async def worker() -> None:
        nonlocal errors, finished
        while clock() < stop:
            started = clock()
            try:
                await call()
            except Exception:
                errors += 1
                continue
            latencies.append(clock() - started)
        finished += 1

    async def report() -> None:
        assert progress is not None
        while True:
            await anyio.sleep(0.1)  # a display refresh rate, not a wait for an event
            progress(len(latencies))

    begin = clock()
    async with anyio.create_task_group() as workers:
        if progress is not None:
            workers.start_soon(report)
        with anyio.move_on_after(seconds + grace):
            async with anyio.create_task_group() as callers:
                for _ in range(in_flight):
                    callers.start_soon(worker)
        workers.cancel_scope.cancel()
    elapsed = min(clock() - begin, seconds + grace)
    errors += in_flight - finished  # calls the watchdog had to cut off
    if len(latencies) >= 2:
        cuts = statistics.quantiles(latencies, n=100)
        p50, p99 = cuts[49], cuts[98]
    else:
        p50 = p99 = latencies[0] if latencies else 0.0
    return Figure(in_flight, len(latencies), elapsed, errors, p50 * 1e6, p99 * 1e6)


@asynccontextmanager
async def echo_calls(
    url: str,
    *,
    payload: int = 16,
    persistent: bool = False,
    options: Mapping[str, Any] | None = None,
    concurrency: int = 64,
) -> AsyncIterator[tuple[Call, ToolServiceClient]]:
    """An echo service and a client, each on its own connection, as two processes
    would be; yields one tool call (``payload`` characters each way) and the client."""
    scheme = "persistent" if persistent else "non-persistent"
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"bench-{suffix}",
        request_queue=f"{scheme}://toolbus/bench/request-{suffix}",
        response_queue=f"non-persistent://toolbus/bench/response-{suffix}",
    )
    async def echo(text: str) -> str:
        return text

    text = "x" * payload
    server_bus = await connect(url, options)
    client_bus = await connect(url, options)
    try:
        async with (
            running(server_bus, echo, concurrency=concurrency),
            ToolServiceClient(client_bus) as client,
        ):

            async def one_call() -> str:
                return await client.call(
                    request_queue=echo.request_queue,
                    response_queue=echo.response_queue,
                    user="bench",
                    arguments={"text": text},
                    service=echo.id,
                )

            yield one_call, client
    finally:
        with anyio.CancelScope(shield=True):
            await client_bus.close()
            await server_bus.close()


async def bench_broker(
    url: str,
    levels: Sequence[int] = (1, 16, 64),
    seconds: float = 5.0,
    *,
    payload: int = 16,
    persistent: bool = False,
    options: Mapping[str, Any] | None = None,
    on_level: Callable[[int], Callable[[int], None] | None] | None = None,
) -> tuple[list[Figure], int]:
    """Tool calls on the broker at ``url`` (see :func:`echo_calls`). Returns the
    figures and the number of calls still pending afterwards (0 unless something
    leaked)."""
    figures = []
    async with echo_calls(
        url, payload=payload, persistent=persistent, options=options, concurrency=max(levels)
    ) as (one_call, client):
        # Warm up: subscriptions, consumer groups, connection pools.
        for _ in range(20):
            await one_call()
        for level in levels:
            progress = on_level(level) if on_level else None
            figures.append(await measure(one_call, level, seconds, progress=progress))
        pending = client.pending
    return figures, pending
