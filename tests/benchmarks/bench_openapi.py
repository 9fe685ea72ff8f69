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

Reported as throughput ratios to httpx, sequentially and with 64 calls in flight.

    uv run python tests/benchmarks/bench_openapi.py [--seconds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

import httpx

from toolbus.benchmark import Figure, measure
from toolbus.domain.config.loading import load_registry
from toolbus.domain.live.announcements import announced_tools
from toolbus.testing.kit import ToolTestKit
from toolbus_openapi import Credential, Limits, ToolsetSettings, open_toolset

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.support.servers import LOOPBACK, free_port, wait_for_port  # noqa: E402

ROUNDS = 3


def start_api(port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "uvicorn", "--factory", "tests.openapi.api:benchmark_app",
        "--host", LOOPBACK, "--port", str(port), "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip
    with log.open("wb") as out:
        process = subprocess.Popen(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    wait_for_port(port, process, 30, log)
    return process


async def main(seconds: float) -> None:
    port = free_port()
    log = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-openapi-{uuid.uuid4().hex}.log"
    api = start_api(port, log)
    url = f"http://{LOOPBACK}:{port}"
    environ = {"BENCH_TOKEN": "t0k3n"}
    try:
        service = open_toolset(
            ToolsetSettings(
                "shop",
                f"{url}/openapi.json",
                credentials=(Credential("bearer", "BENCH_TOKEN"),),
                limits=Limits(max_connections=64),
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

            contestants = {"httpx": direct, "executor": executor, "tool call": tool_call}
            for call in contestants.values():  # warm the pools and the API
                await call()
            rows: list[tuple[int, dict[str, Figure]]] = []
            for in_flight in (1, 64):
                rounds: dict[str, list[Figure]] = {name: [] for name in contestants}
                for _ in range(ROUNDS):
                    for name, call in contestants.items():
                        figure = await measure(call, in_flight, seconds / ROUNDS)
                        assert figure.errors == 0, f"{name}: {figure.errors} calls failed"
                        rounds[name].append(figure)
                best = {name: max(f, key=lambda x: x.throughput) for name, f in rounds.items()}
                rows.append((in_flight, best))
    finally:
        api.terminate()
        api.wait(10)

    print(f"OpenAPI executor vs httpx on the same local API ({seconds:g} s per figure)")
    print(
        f"{'in flight':>9} {'contestant':>10} {'calls/s':>9} {'ratio':>6} "
        f"{'p50 µs':>8} {'p99 µs':>8}"
    )
    for in_flight, best in rows:
        floor = best["httpx"].throughput
        for name, figure in best.items():
            print(
                f"{in_flight:>9} {name:>10} {figure.throughput:>9,.0f} "
                f"{figure.throughput / floor:>6.0%} {figure.p50_us:>8.0f} {figure.p99_us:>8.0f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    asyncio.run(main(parser.parse_args().seconds))
