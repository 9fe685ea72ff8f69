"""What a quota check adds to a call, and what a cached answer saves, in one run.

Run with ``uv run python tests/benchmarks/bench_limits.py`` (``--calls N``,
``--rounds N``, ``--json PATH``). pytest does not collect it. It starts its own
nats-server (the pinned binary) and redis-server (Debian's) on free loopback ports.

1. **A call with a quota check against the same call without one**: two front
   doors over one in-process tool on the memory bus, one with a ``[[limits]]``
   entry counting every call of the user (a limit large enough never to
   refuse), one with none (so no call step at all); the counters kept in
   memory, or in Redis, sealed, as replicas keep them. Target: the checked
   call's throughput at least 90% of the plain one's, in calls per second of
   the process's CPU (such a call is CPU-bound, and on a shared machine the
   CPU time per call moves far less with others' load than the wall clock,
   which is shown too, and includes the waits for the store).
2. **A cache hit against the tool call it replaces**: the tool served over a
   real broker (NATS), called through a door, against the same call answered
   from the door's cache (``"cache": "5m"``), kept in memory or in Redis,
   sealed (where the replica keeps the answers it read in its own memory too).
   Target: the hit at least 5 times as fast. Shown beside them, without a
   target: a hit read from Redis every time, what a replica's first hit of an
   answer another replica kept costs.
3. **Counting one call in the store** when no lease helps (a limit of fewer
   than 32 calls): the sealed compare-and-set the doors do (a read and a
   conditional write), against one Lua script on plaintext numbers, the way
   Redis-only rate limiters count; alone, and eight replicas at once on one
   counter. Figures for the choice docs/decisions.md records; no target.

Rounds alternate the two sides of each comparison, so that load on the machine
falls on both alike; ratios are of the medians of the rounds. Exits with status
1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any, TypeVar

import anyio
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import run_info, write
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from toolbus import AgentSession, Tools, ToolServiceClient, open_tools, running, tool_service
from toolbus.application.doors.counters import Counters
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.steps.cache import CacheStep
from toolbus.application.sealing import load_seal_keys, new_seal_jwk, sealed
from toolbus.domain.config.loading import load_registry
from toolbus.domain.limits.rates import Rate
from toolbus.plugins import connect, connect_state
from toolbus.runtime import opened_door

T = TypeVar("T")

QUOTA_TARGET = 0.90
CACHE_TARGET = 5.0
SEAL_VARIABLE = "BENCH_LIMITS_SEAL_KEY"


@tool_service("bench-shop", config_params=["action"])
async def shop(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return f"{config['action']} for {user}: {arguments.get('item', '')}"


def _tool(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "tool-service",
        "name": name,
        "description": name,
        "service": "bench-shop",
        "action": name,
        "arguments": [{"name": "item", "type": "string", "description": "an item"}],
        **extra,
    }


CONFIG = {
    "tool-service": {"bench-shop": shop.descriptor()},
    "tool": {
        "lookup": _tool("lookup"),
        "catalog": _tool("catalog", annotations={"readOnlyHint": True}, cache="5m"),
    },
}
#: Without the cached tool: the door without a quota then runs no call step at all.
PLAIN_CONFIG = {"tool-service": CONFIG["tool-service"], "tool": {"lookup": _tool("lookup")}}
USERS = {"permissions": {"users": {"alice": ["default"]}, "fallback": []}}
LIMITED = {**USERS, "limits": [{"name": "everything", "calls": 10**12, "every": "1m"}]}


def in_redis(settings: dict[str, Any], url: str) -> dict[str, Any]:
    """``settings`` with the door's store in Redis (its own key prefix), sealed."""
    return {
        **settings,
        "state": f"{url}/0?prefix=bench-{uuid.uuid4().hex[:8]}",
        "seal-keys": [f"env:{SEAL_VARIABLE}"],
    }


async def per_call(session: AgentSession, tool: str, calls: int, *, same: bool = False) -> float:
    """Mean seconds of ``calls`` calls of ``tool`` (the same arguments each time: ``same``)."""
    return (await timed_calls(session, tool, calls, same=same))[0]


async def timed_calls(
    session: AgentSession, tool: str, calls: int, *, same: bool = False
) -> tuple[float, float]:
    """Mean seconds of wall clock and of this process's CPU per call of ``tool``."""
    began, cpu = time.perf_counter(), time.process_time()
    for n in range(calls):
        outcome = await session.call(tool, {"item": "atlas" if same else str(n)})
        assert outcome.ok, outcome.observation
    return (time.perf_counter() - began) / calls, (time.process_time() - cpu) / calls


async def compare(
    baseline: Callable[[], Awaitable[T]], measured: Callable[[], Awaitable[T]], rounds: int
) -> tuple[T, T]:
    """Medians of each side's figures (one number, or a tuple of them), after a warm-up of
    both; the sides take turns, and which goes first alternates too, so that neither
    always follows the other."""
    await baseline()
    await measured()
    base: list[T] = []
    other: list[T] = []
    for round_ in range(rounds):
        if round_ % 2:
            other.append(await measured())
            base.append(await baseline())
        else:
            base.append(await baseline())
            other.append(await measured())
    return _median(base), _median(other)


def _median(figures: list[T]) -> T:
    if isinstance(figures[0], tuple):
        columns = zip(*figures, strict=True)  # type: ignore[call-overload]
        return tuple(statistics.median(column) for column in columns)  # type: ignore[return-value]
    return statistics.median(figures)  # type: ignore[type-var, return-value]


async def quota(calls: int, rounds: int, redis_url: str) -> list[dict[str, Any]]:
    rows = []
    for store, settings in (("memory", LIMITED), ("redis", in_redis(LIMITED, redis_url))):
        async with AsyncExitStack() as stack:
            plain = await stack.enter_async_context(
                open_tools("memory://bench-limits", PLAIN_CONFIG, serve=[shop], settings=USERS)
            )
            limited = await stack.enter_async_context(
                open_tools("memory://bench-limits", PLAIN_CONFIG, settings=settings)
            )
            unchecked = await stack.enter_async_context(AgentSession(plain, user="alice"))
            checked = await stack.enter_async_context(AgentSession(limited, user="alice"))
            (off, off_cpu), (on, on_cpu) = await compare(
                lambda unchecked=unchecked: timed_calls(unchecked, "lookup", calls),
                lambda checked=checked: timed_calls(checked, "lookup", calls),
                rounds,
            )
        rows.append(
            {
                "store": store,
                "plain": off,
                "checked": on,
                "wall_ratio": off / on,
                "plain_cpu": off_cpu,
                "checked_cpu": on_cpu,
                "ratio": off_cpu / on_cpu,
            }
        )
    return rows


async def cache(calls: int, rounds: int, nats_url: str, redis_url: str) -> list[dict[str, Any]]:
    rows = []
    keys = load_seal_keys([f"env:{SEAL_VARIABLE}"])
    async with AsyncExitStack() as stack:
        bus = await connect(nats_url)
        stack.push_async_callback(bus.close)
        await stack.enter_async_context(running(bus, shop))
        client = await stack.enter_async_context(ToolServiceClient(bus))
        tools = Tools(client, load_registry(CONFIG))
        redis_store = await connect_state(f"{redis_url}/0?prefix=bench-{uuid.uuid4().hex[:8]}")
        stack.push_async_callback(redis_store.close)
        sealed_redis = sealed(redis_store, keys)
        doors = {
            "memory": await stack.enter_async_context(
                opened_door(tools, local=None, settings=USERS)
            ),
            "redis": await stack.enter_async_context(
                opened_door(tools, local=None, settings=USERS, store=sealed_redis)
            ),
            "redis, no copy here": FrontDoor.from_files(
                tools, local=None, settings=USERS, steps=[CacheStep(sealed_redis, kept_here=0)]
            ),
        }
        for store, door in doors.items():
            session = await stack.enter_async_context(door.open("alice", counted=False))
            await session.call("catalog", {"item": "atlas"})  # kept from now on
            made, hit = await compare(
                lambda session=session: per_call(session, "lookup", calls, same=True),
                lambda session=session: per_call(session, "catalog", calls, same=True),
                rounds,
            )
            target = store != "redis, no copy here"
            rows.append(
                {"store": store, "call": made, "hit": hit, "times": made / hit, "target": target}
            )
    return rows


#: A sliding window on plaintext numbers, counted by the server in one step: what a
#: Redis-only limiter does. KEYS[1]: the counter; ARGV: limit, window seconds, now.
_LUA = """
local limit, every, now = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local window = math.floor(now / every)
local state = redis.call('HMGET', KEYS[1], 'w', 'c', 'p')
local w, c, p = tonumber(state[1]), tonumber(state[2]) or 0, tonumber(state[3]) or 0
if w == nil or w < window - 1 then c, p = 0, 0 elseif w == window - 1 then c, p = 0, c end
local used = p * (1 - (now - window * every) / every) + c
if used + 1 > limit then return 0 end
redis.call('HSET', KEYS[1], 'w', window, 'c', c + 1, 'p', p)
redis.call('PEXPIRE', KEYS[1], math.ceil(every * 2000))
return 1
"""


async def at_once(operation: Callable[[int], Awaitable[None]], calls: int, in_flight: int) -> float:
    """Mean seconds per operation: ``calls`` of them, ``in_flight`` at a time."""
    began = time.perf_counter()

    async def work(first: int) -> None:
        for n in range(first, calls, in_flight):
            await operation(n)

    async with anyio.create_task_group() as group:
        for worker in range(in_flight):
            group.start_soon(work, worker)
    return (time.perf_counter() - began) / calls


async def counting(calls: int, rounds: int, redis_url: str) -> list[dict[str, Any]]:
    keys = load_seal_keys([f"env:{SEAL_VARIABLE}"])
    store = sealed(await connect_state(f"{redis_url}/0?prefix=bench-{uuid.uuid4().hex[:8]}"), keys)
    client = redis.asyncio.Redis.from_url(redis_url)
    script = client.register_script(_LUA)
    rate = Rate(10**12, 60.0)
    counters = [Counters(store, leases=False) for _ in range(8)]
    rows = []
    try:
        for in_flight in (1, 8):
            key = f"bench/{uuid.uuid4().hex[:8]}"

            async def sealed_cas(n: int, key: str = key) -> None:
                assert (await counters[n % 8].take(key, rate)).granted == 1

            async def lua(n: int, key: str = key) -> None:
                assert await script(keys=[f"lua:{key}"], args=[10**12, 60, time.time()]) == 1

            cas, native = await compare(
                lambda in_flight=in_flight: at_once(sealed_cas, calls, in_flight),
                lambda in_flight=in_flight: at_once(lua, calls, in_flight),
                rounds,
            )
            rows.append({"in_flight": in_flight, "sealed_cas": cas, "lua": native})
    finally:
        await store.close()
        await client.aclose()
    return rows


async def measure(args: argparse.Namespace, nats_url: str, redis_url: str) -> dict[str, Any]:
    return {
        "quota": await quota(args.calls, args.rounds, redis_url),
        "cache": await cache(args.calls, args.rounds, nats_url, redis_url),
        "counting": await counting(args.calls, args.rounds, redis_url),
    }


def show(results: dict[str, Any]) -> bool:
    met = True
    print(
        f"1. a call with a quota check, against the same call without (target ≥ {QUOTA_TARGET:.0%})"
    )
    for row in results["quota"]:
        ok = row["ratio"] >= QUOTA_TARGET
        met = met and ok
        print(
            f"   counters in {row['store']:<6}  CPU per call: plain "
            f"{row['plain_cpu'] * 1e6:6.1f} µs   checked {row['checked_cpu'] * 1e6:6.1f} µs"
            f"   throughput {row['ratio']:6.1%}"
            f"{'' if ok else '   MISSED'}\n"
            f"{'':22}wall clock:   plain {row['plain'] * 1e6:6.1f} µs   checked "
            f"{row['checked'] * 1e6:6.1f} µs   throughput {row['wall_ratio']:6.1%}"
        )
    print(
        f"2. a cache hit, against the tool call over NATS it replaces (target ≥ {CACHE_TARGET:g}x)"
    )
    for row in results["cache"]:
        ok = row["times"] >= CACHE_TARGET or not row["target"]
        met = met and ok
        print(
            f"   kept in {row['store']:<19}  call {row['call'] * 1e6:7.1f} µs   hit "
            f"{row['hit'] * 1e6:7.1f} µs   {row['times']:5.1f}x faster"
            f"{'' if ok else '   MISSED'}{'' if row['target'] else '   (no target)'}"
        )
    print("3. counting one call in Redis without a lease (no target)")
    for row in results["counting"]:
        print(
            f"   {row['in_flight']} at once  sealed compare-and-set "
            f"{row['sealed_cas'] * 1e6:7.1f} µs   Lua on plaintext {row['lua'] * 1e6:7.1f} µs   "
            f"({row['sealed_cas'] / row['lua']:.1f}x)"
        )
    return met


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    os.environ[SEAL_VARIABLE] = json.dumps(new_seal_jwk("bench-limits"))
    info = run_info()
    with tempfile.TemporaryDirectory() as workdir, ExitStack() as servers:
        nats_dir, redis_dir = Path(workdir, "nats"), Path(workdir, "redis")
        nats_dir.mkdir()
        redis_dir.mkdir()
        nats, redis_server = NatsServer(nats_dir), RedisServer(redis_dir)
        servers.enter_context(nats.running())
        servers.enter_context(redis_server.running())
        results = anyio.run(measure, args, nats.url, redis_server.url)
    print(f"{args.calls} calls a round, medians of {args.rounds} rounds")
    met = show(results)
    write(args.json, "limits", info, results)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
