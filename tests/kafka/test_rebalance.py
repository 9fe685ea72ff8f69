"""Rebalances under load: no call is lost and none is run twice."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter, defaultdict

import anyio
import pytest

from toolbus import ToolService, ToolServiceClient, ToolTimeout, running, tool_service
from toolbus.ports import Delivery, Subscription
from toolbus_kafka import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

IN_FLIGHT = 16
# Calls take a while, so that rebalances always find some in flight.
WORK_SECONDS = 0.02


class Milestones:
    """Events that fire when a count reaches a threshold (no polling)."""

    def __init__(self) -> None:
        self.count = 0
        self._waiting: list[tuple[int, anyio.Event]] = []

    def add(self) -> None:
        self.count += 1
        for threshold, event in self._waiting:
            if self.count >= threshold:
                event.set()

    async def reach(self, threshold: int, timeout: float = 30.0) -> None:
        event = anyio.Event()
        self._waiting.append((threshold, event))
        if self.count >= threshold:
            event.set()
        with anyio.fail_after(timeout):
            await event.wait()


@pytest.mark.parametrize("scheme", ["persistent", "non-persistent"])
async def test_a_replica_joining_and_leaving_under_load_loses_and_repeats_nothing(
    kafka_url: str, scheme: str
) -> None:
    name = uuid.uuid4().hex[:10]
    service_id = f"rebalance-{name}"
    request_queue = f"{scheme}://kafka/rebalance/{name}"
    response_queue = f"non-persistent://kafka/rebalance/{name}-answers"
    invocations: Counter[int] = Counter()
    #: Which replica ran each call, and in which phase of the test each was sent:
    #: what a failure needs to say where a call went missing.
    ran_by: defaultdict[int, list[str]] = defaultdict(list)
    sent_while: dict[int, str] = {}
    phase = "the first replica alone"
    answered = Milestones()
    served_by_second = Milestones()

    def replica(name: str, served: Milestones | None) -> ToolService:
        @tool_service(service_id, request_queue=request_queue, response_queue=response_queue)
        async def work(n: int) -> str:
            invocations[n] += 1
            ran_by[n].append(name)
            if served is not None:
                served.add()
            await asyncio.sleep(WORK_SECONDS)
            return f"done {n}"

        return work

    answers: dict[int, str] = {}
    unanswered: list[int] = []
    issued = 0
    stop = anyio.Event()
    buses = [await connect(kafka_url) for _ in range(3)]
    try:
        async with (
            running(buses[0], replica("first", None), concurrency=8),
            ToolServiceClient(buses[1], default_timeout=60) as client,
        ):

            async def caller() -> None:
                nonlocal issued
                while not stop.is_set():
                    n = issued
                    issued += 1
                    sent_while[n] = phase
                    try:
                        answers[n] = await client.call(
                            request_queue=request_queue,
                            response_queue=response_queue,
                            arguments={"n": n},
                        )
                    except ToolTimeout:
                        unanswered.append(n)  # reported below, with where it went
                        return
                    answered.add()

            async with anyio.create_task_group() as load:
                for _ in range(IN_FLIGHT):
                    load.start_soon(caller)
                await answered.reach(50)
                # Joins: the first replica gives up half its partitions mid-load.
                phase = "the second replica joining or serving"
                async with running(buses[2], replica("second", served_by_second), concurrency=8):
                    await served_by_second.reach(30)
                    phase = "the second replica leaving"
                # Left (drained and closed): the first replica takes everything back.
                phase = "the first replica alone again"
                await answered.reach(answered.count + 60)
                stop.set()
    finally:
        for bus in buses:
            await bus.close()

    assert not unanswered, "calls never answered: " + "; ".join(
        f"#{n}, sent while {sent_while[n]}, run by {ran_by[n] or 'no replica'}"
        for n in sorted(unanswered)
    )
    assert served_by_second.count >= 30  # the second replica really took part
    assert answers == {n: f"done {n}" for n in range(issued)}  # none lost
    run_twice = {n: ran_by[n] for n, times in invocations.items() if times > 1}
    assert invocations == dict.fromkeys(range(issued), 1), f"calls run twice: {run_twice}"


async def test_a_call_still_running_when_its_partition_comes_back_is_not_handed_out_again(
    kafka_url: str,
) -> None:
    # One group on two topics: a member joining for the second topic makes the
    # member of the first give up all its partitions and get them all back.
    name = uuid.uuid4().hex[:10]
    queue, other_queue = (f"persistent://kafka/rebalance/{name}-{n}" for n in (1, 2))
    group = f"g-{name}"
    # A short rebalance timeout: the member stops waiting for its call early.
    first_bus = await connect(kafka_url, {"rebalance_timeout_ms": 1500})
    other_bus = await connect(kafka_url)
    try:
        first = await first_bus.subscribe(queue, group=group)
        # One id: one partition, so "held" is read before "next" there.
        for body in (b"held", b"next"):
            await first_bus.publish(queue, body, {"id": "same"})
        held = await next_delivery(first)
        assert held.body == b"held"
        await other_bus.subscribe(other_queue, group=group)  # rebalance, while "held" runs
        following = await next_delivery(first)
        assert following.body == b"next" and not following.redelivered
        await held.ack()
        await following.ack()
        await first.close()
        # Both acks were committed for the partition's new assignment.
        later = await other_bus.subscribe(queue, group=group)
        await other_bus.publish(queue, b"last", {"id": "same"})
        assert (await next_delivery(later)).body == b"last"
    finally:
        await first_bus.close()
        await other_bus.close()


async def next_delivery(subscription: Subscription) -> Delivery:
    with anyio.fail_after(30):
        async for delivery in subscription:
            return delivery
    raise AssertionError("the subscription ended")
