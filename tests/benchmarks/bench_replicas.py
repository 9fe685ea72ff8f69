"""How call throughput grows with service replicas on NATS: 1, 2 and 4 processes.

Each replica is a ``toolbus serve`` process of its own, as in production, on
one nats-server (JetStream on); this process keeps 64 calls in flight through
one ``ToolServiceClient``. Four tools (``replica_tools.py``):

* **wait**: the tool awaits 20 ms, like a tool that calls an API or a database.
  Each replica takes 16 calls at once (``--concurrency 16``), so one replica
  tops out near 16 / 20 ms = 800 calls/s and more replicas add capacity.
* **echo**: no work at all. The limit is CPU: the client, the replicas and
  nats-server share the machine's cores.

each on a ``persistent://`` (JetStream) and a ``non-persistent://`` (core
NATS) request queue. Figures are calls per second, best of ``--rounds``
interleaved rounds, and the ratio to one replica measured in the same run.

    uv run python tests/benchmarks/bench_replicas.py [--seconds 4] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.nats.processes import serve_many
from tests.nats.server import NatsServer
from toolbus import ToolServiceClient
from toolbus_nats import connect

HERE = Path(__file__).parent
REPLICAS = (1, 2, 4)
IN_FLIGHT = 64
CONCURRENCY_PER_REPLICA = 16
TOOLS = ("wait-stored", "wait-plain", "echo-stored", "echo-plain")
SERVICES = [f"replica_tools:{tool.replace('-', '_')}" for tool in TOOLS]


async def throughput(client: ToolServiceClient, prefix: str, tool: str, seconds: float) -> float:
    """Calls per second with ``IN_FLIGHT`` calls kept going for ``seconds``."""
    persistence = "persistent" if tool.endswith("stored") else "non-persistent"
    request_queue = f"{persistence}://bench/request/{prefix}-{tool}"
    response_queue = f"non-persistent://bench/response/{prefix}-{tool}"
    done = 0
    counting = False
    stop = time.perf_counter() + seconds / 4  # warm-up first

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await client.call(
                request_queue=request_queue,
                response_queue=response_queue,
                arguments={"text": "hi"},
                timeout=30,
            )
            if counting:
                done += 1

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    counting = True
    started = time.perf_counter()
    stop = started + seconds
    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    return done / (time.perf_counter() - started)


async def measure(server: NatsServer, workdir: Path, seconds: float, rounds: int) -> None:
    best: dict[tuple[str, int], float] = {}
    for round_number in range(rounds):
        for replicas in REPLICAS:
            prefix = f"r{replicas}-{uuid.uuid4().hex[:6]}"
            env = {"PYTHONPATH": str(HERE), "BENCH_PREFIX": prefix}
            brokers = [f"{server.url}?name=replica-{i}" for i in range(replicas)]
            options = ("--concurrency", str(CONCURRENCY_PER_REPLICA), "--no-announce")
            async with serve_many(SERVICES, brokers, workdir=workdir, env=env, options=options):
                bus = await connect(server.url, {"name": "bench-client"})
                try:
                    async with ToolServiceClient(bus) as client:
                        for tool in TOOLS:
                            rate = await throughput(client, prefix, tool, seconds)
                            key = (tool, replicas)
                            best[key] = max(best.get(key, 0.0), rate)
                            print(
                                f"round {round_number + 1}: {tool:<12} {replicas} replica(s): "
                                f"{rate:8.0f} calls/s",
                                file=sys.stderr,
                            )
                finally:
                    await bus.close()
    print_table(best)


def print_table(best: dict[tuple[str, int], float]) -> None:
    print(f"\n{machine()}; {IN_FLIGHT} calls in flight, {CONCURRENCY_PER_REPLICA} per replica\n")
    header = " | ".join(f"{n} replica{'s' if n > 1 else ''}" for n in REPLICAS)
    print(f"| tool, request queue | {header} |")
    print("|---" * (len(REPLICAS) + 1) + "|")
    for tool in TOOLS:
        base = best[(tool, REPLICAS[0])]
        cells = " | ".join(
            f"{best[(tool, n)]:,.0f} calls/s ({best[(tool, n)] / base:.2f}x)" for n in REPLICAS
        )
        kind, queue = tool.split("-")
        label = f"{kind}, {'persistent' if queue == 'stored' else 'non-persistent'}"
        print(f"| {label} | {cells} |")


def machine() -> str:
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{os.cpu_count()} cores ({model}), Python {platform.python_version()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="measuring time per figure")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (best counts)")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        workdir = Path(directory)
        server = NatsServer(workdir)
        with server.running():
            asyncio.run(measure(server, workdir, arguments.seconds, arguments.rounds))


if __name__ == "__main__":
    main()
