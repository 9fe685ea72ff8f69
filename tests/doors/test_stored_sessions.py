"""Held sessions in a state store: two doors on one store act as two replicas of one door.

The store here is the in-memory one on a clock the test moves; the same holder
runs on NATS key-value and Redis in tests/scaling/, through real replicas.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from tests.session.support import SERVICES, workflow_snapshot
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.held import HeldSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.holding import Held, HeldKey, InProcessHolder, SessionHolder
from toolbus.application.doors.keeping import SESSION
from toolbus.application.doors.stored import MAX_CALLS_HELD, StoredHolder
from toolbus.domain.config.loading import load_registry
from toolbus.memory.state import connect as connect_memory_state
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

LOCAL = {"users": {"carol": ["read-only", "knowledge"]}, "fallback": []}
ARGUMENTS = {
    "knowledge-query": ["question"],
    "graph-update": ["entity", "operation"],
    "text-completion": ["prompt"],
}


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


async def stored(clock: Clock, name: str = "doors") -> StoredHolder:
    return StoredHolder(await connect_memory_state(f"memory://{name}", clock=clock), clock=clock)


def replicas(
    kit: ToolTestKit, holders: list[StoredHolder], **settings: Any
) -> list[tuple[FrontDoor, ListAuditSink]]:
    snapshot = workflow_snapshot(permissions=LOCAL)
    doors = []
    for holder in holders:
        audit = ListAuditSink()
        door = FrontDoor.from_files(
            kit.tools(load_registry(snapshot)),
            local=snapshot,
            settings={"doors": settings} if settings else None,
            audit=audit,
            metrics=ToolbusMetrics.disabled(),
            holder=holder,
        )
        doors.append((door, audit))
    return doors


HOLDERS: dict[str, Callable[[Clock], Any]] = {
    "in-process": lambda clock: InProcessHolder(clock),
    "state store": stored,
}


@pytest.mark.parametrize("kind", list(HOLDERS))
async def test_every_holder_compares_and_sets_and_forgets_after_the_time_to_live(
    kind: str,
) -> None:
    clock = Clock()
    made = HOLDERS[kind](clock)
    holder: SessionHolder = await made if not isinstance(made, InProcessHolder) else made
    data = HeldSession("r", "carol", None, ("default",), "undefined", "undefined", 0.0)
    held = Held(HeldKey("carol", SESSION, "r"), data, clock())

    assert await holder.put(held, ttl=10)
    assert not await holder.put(held, ttl=10)  # the key is taken
    moved = Held(held.key, data, clock(), version=1)
    assert await holder.swap(moved, ttl=10)
    assert not await holder.swap(moved, ttl=10)  # a second writer of version 1 loses
    assert [h.key for h in await holder.owned("carol", SESSION)] == [held.key]
    assert await holder.owned("dave", SESSION) == []
    clock.now += 11
    assert await holder.get(held.key) is None
    assert [h.version for h in await holder.expired()] == [1]
    assert await holder.expired() == []


async def test_owners_never_meet_however_their_names_are_made() -> None:
    holder = await stored(Clock(), "owners")
    data = HeldSession("r", "x", None, ("default",), "undefined", "undefined", 0.0)
    # Without the owner's length in the key, these two would be one key.
    first = Held(HeldKey("a/1:b", SESSION, "c"), data, 0.0)
    second = Held(HeldKey("a", SESSION, "1:b/c"), data, 0.0)

    assert await holder.put(first, ttl=10)
    assert await holder.put(second, ttl=10)
    assert [h.key for h in await holder.owned("a", SESSION)] == [second.key]


async def test_a_session_continues_on_whichever_replica_takes_the_call(kit: ToolTestKit) -> None:
    clock = Clock()
    (left, _), (right, _) = replicas(kit, [await stored(clock), await stored(clock)])
    session = left.open("carol", ["read-only", "knowledge"], counted=False)
    held = await left.held.hold(session, SESSION)
    tools = ["knowledge-query", "graph-update", "text-completion", "knowledge-query"]

    for n, tool in enumerate(tools):
        door = (left, right)[n % 2]
        found = await door.held.get("carol", SESSION, held.key.id)
        assert found is not None
        resumed = door.held.resume(found)
        arguments = {"question": "q", "entity": "e", "operation": "add", "prompt": "p"}
        outcome = await resumed.call(tool, {k: arguments[k] for k in ARGUMENTS[tool]})
        assert outcome.ok, outcome.observation
        await door.held.keep(found, resumed)
        clock.now += 1

    record = await right.held.release("carol", SESSION, held.key.id)
    assert record is not None
    assert [call.tool for call in record.calls] == tools
    assert record.final_state == "analysis"
    assert await left.held.get("carol", SESSION, held.key.id) is None


async def test_calls_that_finish_at_once_on_two_replicas_are_both_kept(kit: ToolTestKit) -> None:
    clock = Clock()
    (left, _), (right, _) = replicas(kit, [await stored(clock), await stored(clock)])
    session = left.open("carol", ["read-only", "knowledge"], counted=False)
    held = await left.held.hold(session, SESSION)

    # Both replicas resume the same version; the left one keeps first.
    on_left = await left.held.get("carol", SESSION, held.key.id)
    on_right = await right.held.get("carol", SESSION, held.key.id)
    assert on_left is not None and on_right is not None
    first, second = left.held.resume(on_left), right.held.resume(on_right)
    await first.call("knowledge-query", {"question": "q"}, "left-call")
    await second.call("knowledge-query", {"question": "q"}, "right-call")
    await left.held.keep(on_left, first)
    kept = await right.held.keep(on_right, second)

    assert kept.version == on_left.version + 2
    assert [c.tool_call_id for c in kept.session.calls] == ["left-call", "right-call"]
    assert kept.session.state == "analysis"


async def test_an_idle_session_is_closed_by_one_replica_with_its_record(kit: ToolTestKit) -> None:
    clock = Clock()
    (left, left_audit), (right, right_audit) = replicas(
        kit, [await stored(clock), await stored(clock)], **{"session-idle-timeout": 60}
    )
    held = await left.held.hold(left.open("carol", ["read-only"], counted=False), SESSION)
    clock.now += 30
    assert await left.held.expire() == [] and await right.held.expire() == []
    clock.now += 31

    closed = [*(await right.held.expire()), *(await left.held.expire())]

    assert [h.key for h in closed] == [held.key]
    assert len(left_audit.records) + len(right_audit.records) == 1
    assert await left.held.owned("carol", SESSION) == []


async def test_limits_count_the_sessions_every_replica_holds(kit: ToolTestKit) -> None:
    clock = Clock()
    (left, _), (right, _) = replicas(
        kit, [await stored(clock), await stored(clock)], **{"max-sessions-per-user": 2}
    )
    await left.held.hold(left.open("carol", ["read-only"], counted=False), SESSION)
    await right.held.hold(right.open("carol", ["read-only"], counted=False), SESSION)

    from toolbus.domain.errors import LimitReached

    with pytest.raises(LimitReached):
        await left.held.hold(left.open("carol", ["read-only"], counted=False), SESSION)


async def test_a_stored_session_writes_its_record_every_hundred_calls_unless_set(
    kit: ToolTestKit,
) -> None:
    # The record travels with a stored session on every call, so it is kept short
    # by default; a configured calls-per-record is obeyed as written.
    clock = Clock()
    ((door, audit),) = replicas(kit, [await stored(clock)])
    ((chosen, chosen_audit),) = replicas(
        kit, [await stored(clock, "chosen")], **{"calls-per-record": 150}
    )
    for front, sink, expected in ((door, audit, 1), (chosen, chosen_audit, 0)):
        held = await front.held.hold(front.open("carol", ["read-only"], counted=False), SESSION)
        for _ in range(MAX_CALLS_HELD + 1):
            found = await front.held.get("carol", SESSION, held.key.id)
            assert found is not None
            resumed = front.held.resume(found)
            outcome = await resumed.call("text-completion", {"prompt": "p"})
            assert outcome.ok, outcome.observation
            await front.held.keep(found, resumed)

        assert len(sink.records) == expected
        if expected:
            assert len(sink.records[0].calls) == MAX_CALLS_HELD
            kept = await front.held.get("carol", SESSION, held.key.id)
            assert kept is not None and len(kept.session.calls) == 1
