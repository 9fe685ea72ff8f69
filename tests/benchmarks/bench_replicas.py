"""How call throughput grows with service replicas on NATS and Kafka: 1, 2 and 4 processes.

Each replica is a ``toolbus serve`` process of its own, as in production, on
one broker (nats-server with JetStream, or a Tansu broker started as the Kafka
tests start it); this process keeps 64 calls in flight through one
``ToolServiceClient``. Four tools (``replica_tools.py``):

* **wait**: the tool awaits 20 ms, like a tool that calls an API or a database.
  Each replica takes 16 calls at once (``--concurrency 16``), so one replica
  tops out near 16 / 20 ms = 800 calls/s and more replicas add capacity.
* **echo**: no work at all. The limit is CPU: the client, the replicas and
  the broker share the machine's cores.

each on a ``persistent://`` and a ``non-persistent://`` request queue (on NATS
a JetStream stream and core NATS; on Kafka offsets committed after the answer
and on receipt). On Kafka the replicas are one consumer group on the request
topic, which the adapter creates with ``--partitions`` partitions (its
``partitions`` option, default 4): each partition belongs to one member, so
replicas beyond the partition count sit idle. Measuring starts once every
group is stable with all its replicas in it.

Figures are calls per second, best of ``--rounds`` interleaved rounds, the
ratio to one replica measured in the same run, and the mean time per call that
follows from them (64 in flight / calls per second).

    uv run python tests/benchmarks/bench_replicas.py [--brokers nats,kafka] [--seconds 4]
        [--rounds 2] [--partitions 4] [--json results/replicas.json]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import label, run_info, write
from tests.nats.processes import serve_many
from toolbus import ToolServiceClient
from toolbus.plugins import connect

HERE = Path(__file__).parent
REPLICAS = (1, 2, 4)
IN_FLIGHT = 64
CONCURRENCY_PER_REPLICA = 16
TOOLS = ("wait-stored", "wait-plain", "echo-stored", "echo-plain")
SERVICES = [f"replica_tools:{tool.replace('-', '_')}" for tool in TOOLS]


@dataclass
class Broker:
    """Where the client connects, where each replica connects, and when all are in place."""

    url: str
    replica_urls: Callable[[int], list[str]]
    settled: Callable[[int], Awaitable[None]]


async def nothing_to_wait_for(_: int) -> None:
    """A NATS queue group hands out messages to whoever is subscribed."""


@contextmanager
def nats_broker(workdir: Path, partitions: int) -> Iterator[Broker]:
    from tests.nats.server import NatsServer

    server = NatsServer(workdir)
    with server.running():
        yield Broker(
            server.url,
            lambda n: [f"{server.url}?name=replica-{i}" for i in range(n)],
            nothing_to_wait_for,
        )


@contextmanager
def kafka_broker(workdir: Path, partitions: int) -> Iterator[Broker]:
    from tests.kafka.broker import TANSU_OPTIONS, tansu_broker

    with tansu_broker(workdir) as bootstrap:
        # 10 ms fetch waits on both sides, as in side_by_side.py (Tansu answers a
        # waiting fetch only when its wait is over).
        url = (
            f"kafka://{bootstrap}?{TANSU_OPTIONS}&fanout_fetch_max_wait_ms=10"
            f"&group_fetch_max_wait_ms=10&partitions={partitions}"
        )

        async def settled(replicas: int) -> None:
            await groups_stable(bootstrap, list(TOOLS), replicas)

        yield Broker(url, lambda n: [f"{url}&client_id=replica-{i}" for i in range(n)], settled)


async def groups_stable(bootstrap: str, groups: list[str], members: int) -> None:
    """Wait until each consumer group is stable with ``members`` members.

    Replicas join one after another and each join rebalances the group, so
    measuring before the last rebalance would count the handover, not the
    replicas. Group state lives on the broker, which announces nothing: ask it.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = time.monotonic() + 60
        while True:
            states = {}
            for name in groups:  # one at a time: Tansu drops a request naming several
                for response in await admin.describe_consumer_groups([name]):
                    for group in response.to_object()["groups"]:
                        states[group["group"]] = (group["state"], len(group["members"]))
            if all(states.get(g) == ("Stable", members) for g in groups):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"consumer groups not stable with {members} members: {states}")
            await asyncio.sleep(0.2)  # polling the broker: there is no event to await
    finally:
        await admin.close()


BROKERS: dict[str, Callable[[Path, int], Any]] = {"nats": nats_broker, "kafka": kafka_broker}


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


async def measure(
    name: str, broker: Broker, workdir: Path, seconds: float, rounds: int
) -> dict[tuple[str, int], float]:
    best: dict[tuple[str, int], float] = {}
    for round_number in range(rounds):
        for replicas in REPLICAS:
            prefix = f"r{replicas}-{uuid.uuid4().hex[:6]}"
            env = {"PYTHONPATH": str(HERE), "BENCH_PREFIX": prefix}
            options = ("--concurrency", str(CONCURRENCY_PER_REPLICA), "--no-announce")
            urls = broker.replica_urls(replicas)
            async with serve_many(SERVICES, urls, workdir=workdir, env=env, options=options):
                await broker.settled(replicas)
                bus = await connect(broker.url)
                try:
                    async with ToolServiceClient(bus) as client:
                        for tool in TOOLS:
                            rate = await throughput(client, prefix, tool, seconds)
                            key = (tool, replicas)
                            best[key] = max(best.get(key, 0.0), rate)
                            print(
                                f"{name} round {round_number + 1}: {tool:<12} "
                                f"{replicas} replica(s): {rate:8.0f} calls/s",
                                file=sys.stderr,
                            )
                finally:
                    await bus.close()
    return best


def rows_of(name: str, best: dict[tuple[str, int], float], partitions: int) -> list[dict[str, Any]]:
    rows = []
    for tool in TOOLS:
        base = best[(tool, REPLICAS[0])]
        kind, queue = tool.split("-")
        for n in REPLICAS:
            row: dict[str, Any] = {
                "broker": name,
                "tool": kind,
                "queue": "persistent" if queue == "stored" else "non-persistent",
                "replicas": n,
                "in_flight": IN_FLIGHT,
                "concurrency": CONCURRENCY_PER_REPLICA,
                "calls_per_s": round(best[(tool, n)], 1),
                "ratio": best[(tool, n)] / base,
                # Little's law: with IN_FLIGHT calls always open, the mean time per call.
                "mean_latency_ms": round(IN_FLIGHT / best[(tool, n)] * 1000, 1),
            }
            if name == "kafka":
                row["partitions"] = partitions
            rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    header = " | ".join(f"{n} replica{'s' if n > 1 else ''}" for n in REPLICAS)
    lines = [f"| broker | tool, request queue | {header} |", "|---" * (len(REPLICAS) + 2) + "|"]
    keys = list(dict.fromkeys((r["broker"], r["tool"], r["queue"]) for r in rows))
    for broker, tool, queue in keys:
        mine = {
            r["replicas"]: r
            for r in rows
            if (r["broker"], r["tool"], r["queue"]) == (broker, tool, queue)
        }
        cells = " | ".join(
            f"{mine[n]['calls_per_s']:,.0f} calls/s ({mine[n]['ratio']:.2f}x, "
            f"{mine[n]['mean_latency_ms']:.0f} ms)"
            for n in REPLICAS
        )
        lines.append(f"| {broker} | {tool}, {queue} | {cells} |")
    return "\n".join(lines)


async def main(
    brokers: list[str], seconds: float, rounds: int, partitions: int
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for name in brokers:
        if name not in BROKERS:
            raise SystemExit(f"no replica benchmark for {name!r}: choose nats or kafka")
        with tempfile.TemporaryDirectory(prefix=f"replicas-{name}-") as directory:
            workdir = Path(directory)
            with BROKERS[name](workdir, partitions) as broker:
                best = await measure(name, broker, workdir, seconds, rounds)
        rows += rows_of(name, best, partitions)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default="nats,kafka", help="nats, kafka or both")
    parser.add_argument("--seconds", type=float, default=4.0, help="measuring time per figure")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds (best counts)")
    parser.add_argument(
        "--partitions", type=int, default=4, help="partitions per Kafka topic (the adapter's)"
    )
    parser.add_argument("--json", type=Path, help="write the results here (for charts.py)")
    args = parser.parse_args()
    chosen = [b.strip() for b in args.brokers.split(",") if b.strip()]
    info = run_info()
    results = asyncio.run(main(chosen, args.seconds, args.rounds, args.partitions))
    print(f"\n{label(info)}; {IN_FLIGHT} calls in flight, {CONCURRENCY_PER_REPLICA} per replica\n")
    print(table(results))
    write(args.json, "replicas", info, results)
