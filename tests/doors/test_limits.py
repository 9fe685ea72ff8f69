"""Rate limits and quotas (``[[limits]]``) at the front door, counted in its state store.

Replicas are several :class:`Counters` (or doors) on one store, as replicas of
a door share theirs; the store here is the in-memory one (the shared stores'
own tests are in ``test_limits_on_stores.py``). Clocks are handed in where
time must move.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import anyio
import pytest

from tests.doors.limits_support import private_metrics, shop_door
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.doors.counters import LEASE_SECONDS, NAMESPACE, Counters
from toolbus.application.sealing import SealKey, SealKeys, sealed
from toolbus.domain.errors import ConfigError, StateStoreError
from toolbus.domain.limits.rates import Rate
from toolbus.plugins import connect_state
from toolbus.ports import StateEntry, StateStore

pytestmark = pytest.mark.anyio


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Writes:
    """A store, counting the reads and writes made through it (how often it is asked)."""

    def __init__(self, store: StateStore) -> None:
        self.store = store
        self.reads = 0
        self.writes = 0

    @property
    def max_value_size(self) -> int | None:
        return self.store.max_value_size

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        self.reads += 1
        return await self.store.get(namespace, key)

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        self.writes += 1
        return await self.store.put(namespace, key, value, ttl=ttl)

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        self.writes += 1
        return await self.store.create(namespace, key, value, ttl=ttl)

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        self.writes += 1
        return await self.store.update(namespace, key, value, version=version, ttl=ttl)

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        return await self.store.delete(namespace, key, version=version)

    async def close(self) -> None:
        await self.store.close()


async def hammer(replicas: list[Counters], key: str, rate: Rate, calls: int) -> int:
    """``calls`` calls spread over the replicas, many at once; how many were granted."""
    granted = 0

    async def one(counters: Counters) -> None:
        nonlocal granted
        taken = await counters.take(key, rate)
        granted += taken.granted

    async with anyio.create_task_group() as group:
        for n in range(calls):
            group.start_soon(one, replicas[n % len(replicas)])
    return granted


# ------------------------------------------------------------------ counting across replicas


@pytest.mark.parametrize("algorithm", ["sliding-window", "token-bucket"])
async def test_replicas_sharing_a_store_let_exactly_the_limit_through(algorithm: str) -> None:
    store = await connect_state(f"memory://limits-replicas-{algorithm}")
    replicas = [Counters(store) for _ in range(3)]
    rate = Rate(100, 3600.0, algorithm)  # type: ignore[arg-type]

    granted = await hammer(replicas, "l/user=alice", rate, 400)

    assert granted == 100


async def test_leases_spare_the_store_most_round_trips_of_a_large_limit() -> None:
    store = Writes(await connect_state("memory://limits-leases"))
    leased, exact = Counters(store), Counters(store, leases=False)
    rate = Rate(1_000_000, 60.0)

    for _ in range(1000):
        assert (await leased.take("big/user=alice", rate)).granted == 1
    with_leases = store.writes
    for _ in range(100):
        assert (await exact.take("big/user=bob", rate)).granted == 1

    # Leases double while calls keep coming: 1, 2, 4, ... 512 calls a write.
    assert with_leases <= 12
    assert store.writes - with_leases == 100


async def test_a_small_limit_is_never_leased_so_replicas_share_it_call_by_call() -> None:
    store = await connect_state("memory://limits-small")
    one, two = Counters(store), Counters(store)
    rate = Rate(4, 60.0)

    granted = [(await counters.take("s/user=a", rate)).granted for counters in (one, two) * 3]

    assert granted == [1, 1, 1, 1, 0, 0]


async def test_a_lease_left_unspent_goes_back_to_the_replicas_that_need_it() -> None:
    clock = Clock()
    store = await connect_state("memory://limits-give-back")
    busy, other = Counters(store, clock=clock), Counters(store, clock=clock)
    rate = Rate(64, 3600.0, "token-bucket")  # leases up to 4 calls

    for _ in range(5):  # leases of 1, 2 and 4: one call left unspent on this replica
        assert (await busy.take("g/user=a", rate)).granted == 1
    taken_by_other = await hammer([other], "g/user=a", rate, 64)
    clock.now += 2 * LEASE_SECONDS + 0.1  # the busy replica's lease ran out, it went quiet
    await busy.take("g/user=a", rate)  # ... and its next write gives the rest back
    after = await hammer([other], "g/user=a", rate, 64)

    assert taken_by_other == 64 - 5 - 2  # two of the last lease of 4 were not spent
    assert after == 1  # of the two given back, the busy replica's one call took one


async def test_a_refused_counter_is_not_asked_again_until_it_may_grant() -> None:
    clock = Clock()
    store = Writes(await connect_state("memory://limits-refused"))
    counters = Counters(store, clock=clock)
    rate = Rate(1, 60.0, "token-bucket")

    assert (await counters.take("r/user=a", rate)).granted == 1
    reads = store.reads
    refusals = [await counters.take("r/user=a", rate) for _ in range(20)]
    asked = store.reads - reads
    clock.now += LEASE_SECONDS
    again = await counters.take("r/user=a", rate)  # a second on: the store is asked again
    clock.now += 60

    assert {taken.granted for taken in refusals} == {0}
    assert 59 <= refusals[-1].retry_after <= 60
    assert asked == 1  # asked once, not twenty times
    assert again.granted == 0 and store.reads == reads + 2
    assert (await counters.take("r/user=a", rate)).granted == 1


async def test_a_counter_holds_only_what_the_arithmetic_says_and_expires() -> None:
    store = await connect_state("memory://limits-stored")
    await Counters(store).take("few/user=alice", Rate(3, 60.0))

    entry = await store.get(NAMESPACE, "few/user=alice")

    assert entry is not None
    assert set(json.loads(entry.value)) == {"window", "count", "previous"}


# ------------------------------------------------------------------ at the door

LIMITS: dict[str, Any] = {
    "limits": [
        {"name": "buys", "calls": 2, "every": "1h", "tools": ["buy"]},
        {"name": "searches", "calls": 3, "every": "1h", "tools": ["search", "buy"]},
    ]
}


async def test_a_call_past_a_limit_is_refused_named_timed_counted_and_audited() -> None:
    audit = ListAuditSink()
    metrics, registry = private_metrics()
    async with shop_door(LIMITS, audit=audit, metrics=metrics) as (door, shop):
        async with door.open("alice") as session:
            outcomes = [await session.call("buy", {"item": "tea"}) for _ in range(3)]
        async with door.open("bob") as session:  # counted per user: bob has his own
            bobs = await session.call("buy", {"item": "tea"})

    assert [o.status for o in outcomes] == ["ok", "ok", "refused"]
    refused = outcomes[2]
    assert (refused.refusal, refused.limit) == ("limit", "buys")
    # At most two windows: the calls of this one weigh into the next as it slides on.
    assert refused.retry_after is not None and 0 < refused.retry_after <= 2 * 3600
    assert "the limit 'buys' allows 2 calls every 1h" in refused.observation
    assert "Try again in" in refused.observation
    assert bobs.ok
    assert shop.reached("alice", "buy") == 2
    (call,) = [c for c in audit.for_user("alice")[0].calls if c.status == "refused"]
    assert (call.refusal, call.limit) == ("limit", "buys")
    assert (
        registry.get_sample_value(
            "toolbus_limit_refusals_total", {"name": "buys", "refused": "tool-call"}
        )
        == 1
    )


async def test_a_call_one_limit_refuses_is_not_counted_in_the_others() -> None:
    # "searches" counts a buy before "buys" refuses it: the refused buy goes back to it.
    settings = {"limits": list(reversed(LIMITS["limits"]))}
    async with shop_door(settings) as (door, _shop), door.open("carol") as session:
        buys = [await session.call("buy") for _ in range(4)]  # the third on: "buys" says no
        searches = [await session.call("search") for _ in range(2)]

    # Two buys counted in "searches"; the two refused were given back to it.
    assert [o.ok for o in buys] == [True, True, False, False]
    assert [o.limit for o in buys[2:]] == ["buys", "buys"]
    assert [o.ok for o in searches] == [True, False]
    assert searches[1].limit == "searches"


async def test_limits_the_store_cannot_count_refuse_the_call_rather_than_lift() -> None:
    store = await connect_state("memory://limits-away")
    async with shop_door(LIMITS, store=store) as (door, shop):
        await store.close()  # the store is gone
        async with door.open("dave") as session:
            outcome = await session.call("buy")

    assert outcome.refusal == "limit" and "cannot be counted now" in outcome.observation
    assert outcome.retry_after == 5.0
    assert shop.reached("dave") == 0


async def test_a_limit_needs_a_store_to_be_counted_in() -> None:
    from toolbus.application.doors.steps import call_steps

    with pytest.raises(ConfigError, match="counted in a state store"):
        call_steps(LIMITS)


async def test_counting_fails_loudly_when_the_store_is_closed() -> None:
    store = await connect_state("memory://limits-closed")
    await store.close()
    with pytest.raises(StateStoreError):
        await Counters(store).take("x/user=a", Rate(1, 60.0))


async def test_a_count_forged_in_the_store_is_refused_not_obeyed() -> None:
    raw = await connect_state("memory://limits-forged")
    store = sealed(raw, SealKeys((SealKey("limits-test", os.urandom(32)),)))
    audit = ListAuditSink()
    # Whoever can write the store "uses up" alice's limit, to lock her out.
    window = int(time.time() // 3600)
    forged = json.dumps({"window": window, "count": 999, "previous": 999}).encode()
    await raw.put(NAMESPACE, "buys/user=alice", forged)

    async with (
        shop_door(LIMITS, store=store, audit=audit) as (door, shop),
        door.open("alice") as session,
    ):
        outcome = await session.call("buy")

    assert outcome.ok and shop.reached("alice", "buy") == 1
    assert [(event.namespace, event.key) for event in audit.events] == [
        (NAMESPACE, "buys/user=alice")
    ]
