"""OpenAPI toolsets: what the executor adds per call over calling the API with httpx directly.

The API is the test suite's shop API under uvicorn in a process of its own
(so it shares no event loop or interpreter with the contestants). In this
process, in one run, interleaved and best of three rounds each:

* **httpx**: ``AsyncClient.get`` of ``/api/items/42``, reading the body: the floor;
* **executor**: ``HTTPExecutor.call`` of the ``getItem`` operation: argument
  checks, URL building and the host check, the credential transport, bounded
  reading, compact JSON;
* **tool call**: the same as a tool, ``Tools.call("shop_getItem")`` over the
  in-memory bus: the executor plus a whole toolbus round trip.

Reported as ratios to httpx, sequentially and with 64 calls in flight: of
throughput, and of the CPU time this process spends per call (the API's own
process excluded), which a busy machine disturbs less than wall-clock figures.

    uv run python tests/benchmarks/bench_openapi.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path

import httpx

from toolbus.benchmark import Figure, measure
from toolbus.domain.config.loading import load_registry
from toolbus.domain.live.announcements import announced_tools
from toolbus.testing.kit import ToolTestKit
from toolbus_openapi import Credential, Limits, ToolsetSettings, open_toolset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.servers import LOOPBACK, server_on_free_port  # noqa: E402

ROUNDS = 3
Call = Callable[[], Awaitable[None]]


def api_argv(port: int) -> list[str]:
    """The local API under uvicorn on ``port``."""
    return [
        sys.executable, "-m", "uvicorn", "--factory", "tests.openapi.api:benchmark_app",
        "--host", LOOPBACK, "--port", str(port), "--log-level", "warning", "--no-access-log",
        # Connections stay open between rounds: each contestant's pool stays warm.
        "--timeout-keep-alive", "120",
    ]  # fmt: skip


def counted(name: str, call: Call, failures: Counter[str]) -> Call:
    """``call``, counting the failures by contestant and type (``measure`` only counts them)."""

    async def counting() -> None:
        try:
            await call()
        except Exception as exc:
            failures[f"{name}: {type(exc).__name__}"] += 1
            raise

    return counting


async def main(seconds: float) -> None:
    failures: Counter[str] = Counter()
    api = ExitStack()
    workdir = Path(tempfile.mkdtemp(prefix="bench-openapi-"))
    port, _ = api.enter_context(
        server_on_free_port(api_argv, workdir=workdir, env={"PYTHONPATH": str(ROOT)})
    )
    url = f"http://{LOOPBACK}:{port}"
    environ = {"BENCH_TOKEN": "t0k3n"}
    try:
        service = open_toolset(
            ToolsetSettings(
                "shop",
                f"{url}/openapi.json",
                base_url=f"{url}/api",
                credentials=(Credential("bearer", "BENCH_TOKEN"),),
                limits=Limits(max_connections=64),
                allow_insecure_spec=True,  # the local API serves it over plain http
            ),
            environ=environ,
        )
        operation = service.catalog.by_id()["getItem"]
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
        async with (
            httpx.AsyncClient(limits=limits, trust_env=False) as plain,
            service.executor,
            AsyncExitStack() as stack,
        ):
            kit = await ToolTestKit.open(stack)
            await kit.serve(service)
            registry = load_registry(
                {
                    "tool-service": {service.id: service.descriptor()},
                    "tool": announced_tools(service.id, service.tools()),
                }
            )
            tools = kit.tools(registry)
            headers = {"Authorization": "Bearer t0k3n"}

            async def direct() -> None:
                response = await plain.get(f"{url}/api/items/42", headers=headers)
                response.raise_for_status()
                response.json()

            async def executor() -> None:
                await service.executor.call(operation, {"item_id": "42"})

            async def tool_call() -> None:
                await tools.call("shop_getItem", {"item_id": "42"})

            contestants = {
                name: counted(name, call, failures)
                for name, call in (
                    ("httpx", direct),
                    ("executor", executor),
                    ("tool call", tool_call),
                )
            }
            rows: list[tuple[int, dict[str, tuple[Figure, float]]]] = []
            for in_flight in (1, 64):
                rounds: dict[str, list[tuple[Figure, float]]] = {name: [] for name in contestants}
                for call in contestants.values():  # open every pool's connections first
                    await asyncio.gather(*(call() for _ in range(in_flight)))
                for _ in range(ROUNDS):
                    for name, call in contestants.items():
                        cpu = time.process_time()
                        figure = await measure(call, in_flight, seconds / ROUNDS)
                        cpu = time.process_time() - cpu
                        rounds[name].append((figure, cpu / max(figure.calls, 1) * 1e6))
                best = {
                    name: max(results, key=lambda result: result[0].throughput)
                    for name, results in rounds.items()
                }
                rows.append((in_flight, best))
    finally:
        api.close()
    if failures:
        print("failed calls (not timed):", dict(failures))

    print(f"OpenAPI executor vs httpx on the same local API ({seconds:g} s per figure)")
    print(
        f"{'in flight':>9} {'contestant':>10} {'calls/s':>9} {'ratio':>6} {'p50 µs':>8} "
        f"{'p99 µs':>8} {'CPU µs/call':>12} {'CPU ratio':>9}"
    )
    for in_flight, best in rows:
        floor, floor_cpu = best["httpx"][0].throughput, best["httpx"][1]
        for name, (figure, cpu) in best.items():
            print(
                f"{in_flight:>9} {name:>10} {figure.throughput:>9,.0f} "
                f"{figure.throughput / floor:>6.0%} {figure.p50_us:>8.0f} {figure.p99_us:>8.0f} "
                f"{cpu:>12.0f} {cpu / floor_cpu:>9.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(parser.parse_args().seconds))
