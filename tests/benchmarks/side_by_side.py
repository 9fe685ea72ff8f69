"""toolbus against the raw client and FastStream, per broker, in one run on the same server.

For every broker picked, three contestants make the same echo round trips:

* **raw**: the broker's own Python client moving the same bytes with an ``id``
  and a dict of futures, nothing on top: the physical floor from Python. Each
  ``bench_<broker>.py`` next to this file defines it as ``raw_loop(url)``.
* **toolbus**: a ``ServiceHost`` and a ``ToolServiceClient`` on their own
  connections: JSON envelope both ways, validation, deadlines, metrics, acks.
* **FastStream**, where it does request/reply: ``broker.request()`` against a
  ``@broker.subscriber`` echo, on NATS, RabbitMQ and in memory (its
  ``TestNatsBroker`` against our in-memory bus). It has no Pulsar broker, and
  its Kafka broker refuses ``request()`` outside its test client.

Each figure is the best of interleaved rounds, so load elsewhere on the machine
hits all contestants alike. Then, in a fresh process per broker, 100,000 toolbus
calls: the peak RSS and the number of pending calls left (must be 0).

    uv run python tests/benchmarks/side_by_side.py [--brokers memory,nats,kafka,pulsar,rabbitmq]
        [--seconds 6] [--calls 100000] [--markdown] [--loop asyncio|uvloop|auto]
        [--json results/side_by_side.json]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import run_info, write
from toolbus._internal.event_loops import loop_factory
from toolbus.benchmark import Figure, echo_calls, measure

Call = Callable[[], Awaitable[Any]]
LEVELS = (1, 64)
ROUNDS = 3
# -- where each broker comes from ------------------------------------------------------


@contextmanager
def memory_broker(_: Path) -> Iterator[str]:
    yield f"memory://side-by-side-{uuid.uuid4().hex[:8]}"


@contextmanager
def nats_broker(workdir: Path) -> Iterator[str]:
    from tests.nats.server import NatsServer

    server = NatsServer(workdir)
    with server.running():
        yield server.url


@contextmanager
def pulsar_broker(workdir: Path) -> Iterator[str]:
    from tests.pulsar.server import pulsar_lite_server

    with pulsar_lite_server(workdir) as url:
        yield url


@contextmanager
def kafka_broker(workdir: Path) -> Iterator[str]:
    from tests.benchmarks.bench_kafka import TANSU_OPTIONS
    from tests.kafka.broker import tansu_broker

    # Both contestants use the same fetch settings (10 ms waits; see bench_kafka.py).
    with tansu_broker(workdir) as bootstrap:
        yield (
            f"kafka://{bootstrap}?{TANSU_OPTIONS}"
            "&fanout_fetch_max_wait_ms=10&group_fetch_max_wait_ms=10"
        )


@contextmanager
def rabbitmq_broker(workdir: Path) -> Iterator[str]:
    from tests.rabbitmq.server import rabbitmq_node

    with rabbitmq_node(workdir) as url:
        yield url


BROKERS: dict[str, Callable[[Path], AbstractAsyncContextManager[str] | Any]] = {
    "memory": memory_broker,
    "nats": nats_broker,
    "pulsar": pulsar_broker,
    "kafka": kafka_broker,
    "rabbitmq": rabbitmq_broker,
}


# -- contestants -------------------------------------------------------------------------


async def raw_contestant(broker: str, url: str) -> Call:
    if broker == "memory":
        from tests.benchmarks.bench_memory import RawLoop

        raw = RawLoop()
        loop = asyncio.get_running_loop()
        raw.tasks = [loop.create_task(raw.serve()), loop.create_task(raw.listen())]  # type: ignore[attr-defined]
        return raw.call
    module = __import__(f"tests.benchmarks.bench_{broker}", fromlist=["raw_loop"])
    return await module.raw_loop(url)  # type: ignore[no-any-return]


@asynccontextmanager
async def toolbus_contestant(url: str) -> AsyncIterator[Call]:
    async with echo_calls(url, payload=2) as (call, client):
        yield call
        assert client.pending == 0, "toolbus leaked pending calls"


@asynccontextmanager
async def faststream_contestant(broker: str, url: str) -> AsyncIterator[Call | None]:
    if broker == "memory":
        from faststream.nats import NatsBroker, TestNatsBroker

        # logger=None: FastStream logs every message by default, which would be
        # measuring its logging rather than its messaging.
        fs = NatsBroker(logger=None)

        @fs.subscriber("side-by-side-echo")
        async def echo(body: dict[str, str]) -> dict[str, str]:
            return body

        async with TestNatsBroker(fs) as test_broker:

            async def call() -> Any:
                reply = await test_broker.request({"text": "hi"}, "side-by-side-echo", timeout=30)
                return await reply.decode()

            yield call
        return
    if broker == "nats":
        from faststream.nats import NatsBroker

        fs = NatsBroker(url, logger=None)
        subject = f"side-by-side-{uuid.uuid4().hex[:8]}"

        @fs.subscriber(subject, queue="echo")
        async def echo_nats(body: dict[str, str]) -> dict[str, str]:
            return body

        await fs.start()
        try:

            async def call() -> Any:
                reply = await fs.request({"text": "hi"}, subject, timeout=30)
                return await reply.decode()

            yield call
        finally:
            await fs.stop()
        return
    if broker == "rabbitmq":
        from faststream.rabbit import RabbitBroker

        rabbit = RabbitBroker(url, logger=None)
        queue = f"side-by-side-{uuid.uuid4().hex[:8]}"

        @rabbit.subscriber(queue)
        async def echo_rabbit(body: dict[str, str]) -> dict[str, str]:
            return body

        await rabbit.start()
        try:

            async def call() -> Any:
                reply = await rabbit.request({"text": "hi"}, queue, timeout=30)
                return await reply.decode()

            yield call
        finally:
            await rabbit.stop()
        return
    # FastStream has no Pulsar broker, and its KafkaBroker.request() raises
    # FeatureNotSupportedException outside its test client: no request/reply there.
    yield None


# -- running and reporting ---------------------------------------------------------------


@dataclass
class Row:
    broker: str
    contestant: str
    figures: dict[int, Figure]


async def contest(broker: str, url: str, seconds: float) -> list[Row]:
    raw = await raw_contestant(broker, url)
    rows = {name: Row(broker, name, {}) for name in ("raw", "toolbus", "FastStream")}
    async with toolbus_contestant(url) as ours, faststream_contestant(broker, url) as theirs:
        # A reply lost on an at-most-once topic costs one failed call: measure()
        # cuts off calls still unanswered after the window (no per-call guard).
        calls: dict[str, Call] = {"raw": raw, "toolbus": ours}
        if theirs is not None:
            calls["FastStream"] = theirs
        for call in calls.values():  # warm up connections, groups and caches
            for _ in range(50):
                await call()
        for level in LEVELS:
            best: dict[str, Figure] = {}
            for _ in range(ROUNDS):
                for name, call in calls.items():
                    figure = await measure(call, level, seconds / ROUNDS, grace=10.0)
                    if name not in best or figure.throughput > best[name].throughput:
                        best[name] = figure
            for name, figure in best.items():
                rows[name].figures[level] = figure
    return [row for row in rows.values() if row.figures]


def rss_after_calls(broker: str, calls: int, loop: str = "asyncio") -> dict[str, Any]:
    """100,000 toolbus calls in a fresh process: peak RSS and pending calls left."""
    result = subprocess.run(
        [sys.executable, __file__, "--rss-child", broker, "--calls", str(calls), "--loop", loop],
        capture_output=True,
        text=True,
        check=True,
    )
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


async def rss_child(broker: str, calls: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix=f"rss-{broker}-") as workdir,
        BROKERS[broker](Path(workdir)) as url,
    ):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # toolbus_contestant asserts on the way out that no call is left pending.
        async with toolbus_contestant(url) as call:

            async def worker(count: int) -> None:
                for _ in range(count):
                    await call()

            await asyncio.gather(*(worker(calls // 64) for _ in range(64)))
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = {"calls": calls // 64 * 64, "rss_before_kib": before, "peak_rss_kib": after}
    print(json.dumps({**report, "pending_after": 0}))
    sys.stdout.flush()
    os._exit(0)


def share(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.0%}" if theirs else "n/a"


def times(ours: float, theirs: float) -> str:
    return f"{ours / theirs:.1f}×" if theirs else "n/a"


def report(rows: list[Row], rss: dict[str, dict[str, Any]], markdown: bool) -> None:
    sep = " | " if markdown else "  "
    head = [
        "broker",
        "contestant",
        "seq p50 µs",
        "seq calls/s",
        "64 in flight calls/s",
        "vs raw (seq / 64)",
        "toolbus vs FastStream (64)",
        "failed calls",
    ]
    lines = [sep.join(head)]
    if markdown:
        lines = ["| " + lines[0] + " |", "|" + "---|" * len(head)]
    for broker in dict.fromkeys(r.broker for r in rows):
        mine = [r for r in rows if r.broker == broker]
        raw = next(r for r in mine if r.contestant == "raw")
        fs = next((r for r in mine if r.contestant == "FastStream"), None)
        for row in mine:
            seq, par = row.figures[1], row.figures[64]
            vs_raw = (
                f"{share(seq.throughput, raw.figures[1].throughput)} / "
                f"{share(par.throughput, raw.figures[64].throughput)}"
            )
            vs_fs = (
                times(par.throughput, fs.figures[64].throughput)
                if fs is not None and row.contestant == "toolbus"
                else ""
            )
            cells = [
                broker,
                row.contestant,
                f"{seq.p50_us:,.0f}",
                f"{seq.throughput:,.0f}",
                f"{par.throughput:,.0f}",
                vs_raw,
                vs_fs,
                str(seq.errors + par.errors),
            ]
            lines.append(("| " + sep.join(cells) + " |") if markdown else sep.join(cells))
    print("\n".join(lines))
    for broker, figures in rss.items():
        print(
            f"\n{broker}: {figures['calls']:,} toolbus calls, peak RSS "
            f"{figures['peak_rss_kib'] / 1024:,.0f} MiB (at start "
            f"{figures['rss_before_kib'] / 1024:,.0f} MiB), pending afterwards "
            f"{figures['pending_after']}"
        )


def contest_in_child(broker: str, seconds: float, loop: str = "asyncio") -> list[Row]:
    """One broker's contest in a fresh process, so no client outlives its broker."""
    result = subprocess.run(
        [
            sys.executable,
            __file__,
            "--contest-child",
            broker,
            "--seconds",
            str(seconds),
            "--loop",
            loop,
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    return [
        Row(r["broker"], r["contestant"], {int(k): Figure(**f) for k, f in r["figures"].items()})
        for r in rows
    ]


async def contest_child(broker: str, seconds: float) -> None:
    with (
        tempfile.TemporaryDirectory(prefix=f"side-{broker}-") as workdir,
        BROKERS[broker](Path(workdir)) as url,
    ):
        rows = await contest(broker, url, seconds)
    print(json.dumps([
        {"broker": r.broker, "contestant": r.contestant,
         "figures": {level: asdict(f) for level, f in r.figures.items()}}
        for r in rows
    ]))  # fmt: skip
    # Raw clients keep background threads; the figures are out, so leave at once.
    sys.stdout.flush()
    os._exit(0)


def as_json(rows: list[Row]) -> list[dict[str, Any]]:
    return [
        {
            "broker": r.broker,
            "contestant": r.contestant,
            "figures": {str(level): f.as_dict() for level, f in r.figures.items()},
        }
        for r in rows
    ]


def require_faststream(script: str) -> None:
    """FastStream, a contestant, comes with the bench dependency group: say how to get it."""
    if importlib.util.find_spec("faststream") is None:
        raise SystemExit(
            "FastStream, a contestant, is in the bench dependency group: "
            f"uv run --group bench python tests/benchmarks/{script} ..."
        )


def main(
    brokers: list[str], seconds: float, calls: int, markdown: bool, loop: str, path: Path | None
) -> None:
    info = run_info(loop)
    rows: list[Row] = []
    for broker in brokers:
        print(f"measuring {broker} …", file=sys.stderr)
        rows += contest_in_child(broker, seconds, loop)
    rss = {broker: rss_after_calls(broker, calls, loop) for broker in brokers} if calls else {}
    print(
        f"{platform.python_implementation()} {platform.python_version()} ({sys.executable}), "
        f"{info['event_loop']}; load average {info['load_average'][0]} at the start, "
        f"{os.getloadavg()[0]:.2f} at the end"
    )
    report(rows, rss, markdown)
    write(path, "side_by_side", info, {"rows": as_json(rows), "rss": rss})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--loop", default="asyncio", help="asyncio, uvloop or auto")
    parser.add_argument("--json", type=Path, help="write the results here (for charts.py)")
    parser.add_argument("--rss-child", help=argparse.SUPPRESS)
    parser.add_argument("--contest-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    require_faststream("side_by_side.py")
    factory = loop_factory(args.loop)
    if args.rss_child:
        asyncio.Runner(loop_factory=factory).run(rss_child(args.rss_child, args.calls))
    elif args.contest_child:
        asyncio.Runner(loop_factory=factory).run(contest_child(args.contest_child, args.seconds))
    else:
        chosen = [b.strip() for b in args.brokers.split(",") if b.strip()]
        unknown = set(chosen) - set(BROKERS)
        if unknown:
            raise SystemExit(f"unknown broker(s) {sorted(unknown)}; choose from {list(BROKERS)}")
        main(chosen, args.seconds, args.calls, args.markdown, args.loop, args.json)
