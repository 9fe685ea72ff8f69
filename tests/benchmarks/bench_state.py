"""get, put and compare-and-set on each state store, against the raw client in the same run.

Run with ``uv run python tests/benchmarks/bench_state.py`` (``--ops N``, ``--rounds N``,
``--in-flight N``, ``--json PATH``). pytest does not collect it. It starts its own
nats-server (the pinned binary) and redis-server (Debian's) on free loopback ports.

For each store and operation it times ``--ops`` operations one at a time, and the
same with ``--in-flight`` running at once, best of ``--rounds`` (stores and raw
clients alternate, so that a busy moment of the machine does not fall on one
side only). Each row is the store's time per operation, and its ratio to:

* the raw client doing the same request (nats-py's key-value ``get``/``put``/
  ``update``; redis-py's ``HMGET`` and the store's own write script by
  ``EVALSHA``): what the adapter adds;
* the in-memory store: what going over the network costs.

A gateway session call will read its session and write it back by
compare-and-set: ``get + update`` is printed as that pair's cost.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import run_info, write
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from toolbus.plugins import connect_state
from toolbus.ports import StateStore
from toolbus_nats.state import NatsStateStore
from toolbus_nats.state_options import bucket_key
from toolbus_redis.state import _WRITE, RedisStateStore

VALUE = b'{"user": "alice", "state": "analysis", "calls": 3, "groups": ["default"]}' * 4
NS = "bench"

Operation = Callable[[int], Awaitable[object]]


async def timed(operation: Operation, ops: int, in_flight: int) -> float:
    """Seconds per operation: ``ops`` of them, ``in_flight`` at a time."""
    if in_flight == 1:
        start = time.perf_counter()
        for i in range(ops):
            await operation(i)
        return (time.perf_counter() - start) / ops
    per_task = ops // in_flight

    async def worker(first: int) -> None:
        # Worker w takes i = w, w + in_flight, ...: with keys a multiple of in_flight,
        # each key is one worker's, and compare-and-set never meets a rival.
        for k in range(per_task):
            await operation(first + k * in_flight)

    start = time.perf_counter()
    async with anyio.create_task_group() as tasks:
        for w in range(in_flight):
            tasks.start_soon(worker, w)
    return (time.perf_counter() - start) / (per_task * in_flight)


class Versions:
    """The version each key holds, for compare-and-set loops that never conflict."""

    def __init__(self) -> None:
        self.of: dict[int, int] = {}


def store_operations(store: StateStore, keys: int) -> dict[str, Operation]:
    versions = Versions()

    async def put(i: int) -> None:
        versions.of[i % keys] = await store.put(NS, f"key-{i % keys}", VALUE)

    async def get(i: int) -> None:
        await store.get(NS, f"key-{i % keys}")

    async def update(i: int) -> None:
        key = i % keys
        found = await store.update(NS, f"key-{key}", VALUE, version=versions.of[key])
        assert found is not None, "the benchmark's own compare-and-set conflicted"
        versions.of[key] = found

    async def session_turn(i: int) -> None:
        entry = await store.get(NS, f"key-{i % keys}")
        assert entry is not None
        await store.update(NS, f"key-{i % keys}", VALUE, version=entry.version)

    return {"put": put, "get": get, "update": update, "get + update": session_turn}


def raw_nats_operations(store: NatsStateStore, keys: int) -> dict[str, Operation]:
    kv = store.kv
    names = [bucket_key(NS, f"raw-{k}") for k in range(keys)]
    versions: dict[int, int] = {}

    async def put(i: int) -> None:
        versions[i % keys] = await kv.put(names[i % keys], VALUE)

    async def get(i: int) -> None:
        await kv.get(names[i % keys])

    async def update(i: int) -> None:
        key = i % keys
        versions[key] = await kv.update(names[key], VALUE, last=versions[key])

    async def session_turn(i: int) -> None:
        entry = await kv.get(names[i % keys])
        assert entry.revision is not None
        await kv.update(names[i % keys], VALUE, last=entry.revision)

    return {"put": put, "get": get, "update": update, "get + update": session_turn}


def raw_redis_operations(store: RedisStateStore, keys: int) -> dict[str, Operation]:
    client: redis.asyncio.Redis = store.client
    names = [f"toolbus:{NS}:raw-{k}".encode() for k in range(keys)]
    versions: dict[int, bytes] = {}
    sha: list[str] = []

    async def script(*args: Any) -> Any:
        if not sha:
            sha.append(await client.script_load(_WRITE))
        return await client.evalsha(sha[0], 1, *args)

    async def put(i: int) -> None:
        versions[i % keys] = await script(names[i % keys], "put", VALUE, "", "")

    async def get(i: int) -> None:
        await client.hmget(names[i % keys], [b"v", b"n"])

    async def update(i: int) -> None:
        key = i % keys
        versions[key] = await script(names[key], "update", VALUE, "", versions[key])

    async def session_turn(i: int) -> None:
        _, version = await client.hmget(names[i % keys], [b"v", b"n"])
        await script(names[i % keys], "update", VALUE, "", version)

    return {"put": put, "get": get, "update": update, "get + update": session_turn}


async def measure(args: argparse.Namespace, urls: dict[str, str]) -> list[dict[str, Any]]:
    stores = {name: await connect_state(url) for name, url in urls.items()}
    nats_store, redis_store = stores["nats"], stores["redis"]
    assert isinstance(nats_store, NatsStateStore) and isinstance(redis_store, RedisStateStore)
    keys = args.in_flight * max(1, 16 // args.in_flight)
    sides: dict[str, dict[str, Operation]] = {
        name: store_operations(store, keys) for name, store in stores.items()
    }
    sides["raw nats-py"] = raw_nats_operations(nats_store, keys)
    sides["raw redis-py"] = raw_redis_operations(redis_store, keys)
    best: dict[tuple[str, str, int], float] = {}
    for _ in range(args.rounds):
        for side, operations in sides.items():
            for in_flight in (1, args.in_flight):
                for operation, run in operations.items():  # put first: the rest need the keys
                    seconds = await timed(run, args.ops, in_flight)
                    slot = (side, operation, in_flight)
                    best[slot] = min(best.get(slot, seconds), seconds)
    for store in stores.values():
        await store.close()
    raw_of = {"nats": "raw nats-py", "redis": "raw redis-py"}
    rows = []
    for side in ("memory", "nats", "redis"):
        for in_flight in (1, args.in_flight):
            for operation in sides[side]:
                seconds = best[(side, operation, in_flight)]
                raw = best.get((raw_of.get(side, ""), operation, in_flight))
                memory = best[("memory", operation, in_flight)]
                rows.append(
                    {
                        "store": side,
                        "operation": operation,
                        "in_flight": in_flight,
                        "seconds": seconds,
                        "per_second": 1 / seconds,
                        "raw_seconds": raw,
                        "of_raw": None if raw is None else raw / seconds,
                        "times_memory": seconds / memory,
                    }
                )
    return rows


def show(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'store':<7} {'operation':<13} {'in flight':>9} {'per op':>10} {'ops/s':>9} "
        f"{'raw client':>11} {'of raw':>7} {'x memory':>9}"
    )
    for row in rows:
        raw = "" if row["raw_seconds"] is None else f"{row['raw_seconds'] * 1e6:9.1f}µs"
        of_raw = "" if row["of_raw"] is None else f"{row['of_raw']:6.0%}"
        print(
            f"{row['store']:<7} {row['operation']:<13} {row['in_flight']:>9} "
            f"{row['seconds'] * 1e6:8.1f}µs {row['per_second']:>9,.0f} {raw:>11} "
            f"{of_raw:>7} {row['times_memory']:>8.0f}x"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=16)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    info = run_info()
    with tempfile.TemporaryDirectory() as workdir, ExitStack() as servers:
        nats_dir, redis_dir = Path(workdir, "nats"), Path(workdir, "redis")
        nats_dir.mkdir()
        redis_dir.mkdir()
        nats, redis_server = NatsServer(nats_dir), RedisServer(redis_dir)
        servers.enter_context(nats.running())
        servers.enter_context(redis_server.running())
        urls = {"memory": "memory://bench", "nats": nats.url, "redis": redis_server.url}
        rows = anyio.run(measure, args, urls)
    print(f"state stores, {args.ops} operations of {len(VALUE)}-byte values, best of {args.rounds}")
    show(rows)
    write(args.json, "state", info, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
