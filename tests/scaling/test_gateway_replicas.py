"""Two gateway replicas behind a round-robin load balancer, on NATS key-value and on Redis.

Real parts throughout: two ``toolbus gateway`` processes, haproxy with no
stickiness in front of them, the 3-node NATS cluster as the broker (R3
key-value buckets as the store, or Redis), and two replicas of the tools
verifying signed calls. A session of ten calls alternates replicas and keeps
its state; SIGKILLing the replica that served the last call loses nothing;
every signed call replayed onto the bus runs no second time on any replica.
"""

from __future__ import annotations

import itertools
import signal
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TypeVar

import anyio
import httpx
import pytest

from tests.nats.cluster import NatsCluster
from tests.scaling.balancer import SERVED_BY, round_robin
from tests.scaling.deployment import ALICE_KEY, GROUPS, TEN_CALLS, Deployment
from toolbus.domain.calls.wire import decode_response
from toolbus.plugins import connect
from toolbus.ports import Subscription

T = TypeVar("T")

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

HEADERS = {"Authorization": f"Bearer {ALICE_KEY}"}


async def test_a_session_alternates_replicas_survives_one_and_is_never_replayed(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    state, options = store_url
    deployment = Deployment(tmp_path, scaling_cluster.url(), state, options)
    bus = await connect(deployment.broker)
    captured: Collected[tuple[str, bytes, dict[str, str]]] = Collected()
    refused: Collected[str] = Collected()
    async with AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        await stack.enter_async_context(deployment.tool_replicas())
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)
        for service in deployment.services:
            # What anyone on the bus could capture: every signed request, as sent; and
            # the answers, to see the replays refused.
            requests = await bus.subscribe(service.request_queue)
            stack.push_async_callback(requests.close)
            responses = await bus.subscribe(service.response_queue)
            stack.push_async_callback(responses.close)
            tasks.start_soon(capture, requests, service.request_queue, captured)
            tasks.start_soon(refusals, responses, refused)
        left, left_port = await stack.enter_async_context(deployment.door("gateway"))
        right, right_port = await stack.enter_async_context(deployment.door("gateway"))
        replicas = {"r0": left, "r1": right}
        base = stack.enter_context(round_robin([left_port, right_port], tmp_path / "haproxy"))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=base, headers=HEADERS))

        opened = await http.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text
        session = opened.json()["session_id"]
        served: list[str] = []
        for n, (tool, state_after) in enumerate(TEN_CALLS):
            answer = await http.post(
                f"/v1/sessions/{session}/calls",
                json={"name": tool, "arguments": {"n": n}, "tool_call_id": f"c{n}"},
            )
            assert answer.status_code == 200, answer.text
            outcome = answer.json()
            assert (outcome["status"], outcome["state"]) == ("ok", state_after), outcome
            served.append(answer.headers[SERVED_BY])

        # Round robin with no stickiness: every call went to the other replica.
        assert all(a != b for a, b in itertools.pairwise(served)), served

        # The replica that served the last call dies, as in a crash.
        replicas[served[-1]].process.send_signal(signal.SIGKILL)
        await replicas[served[-1]].process.wait()
        after = await http.post(
            f"/v1/sessions/{session}/calls",
            json={"name": "step-in", "arguments": {"n": 10}, "tool_call_id": "c10"},
        )
        assert after.status_code == 200, after.text
        assert after.json()["state"] == "working"
        assert after.headers[SERVED_BY] != served[-1]
        closed = await http.delete(f"/v1/sessions/{session}")
        assert closed.status_code == 200, closed.text
        record = closed.json()["audit"]
        assert [call["tool_call_id"] for call in record["calls"]] == [f"c{n}" for n in range(11)]

        # Replays: every captured signed request published again, twice.
        await captured.reach(11)
        for queue, body, properties in list(captured):
            assert "call-token" in properties
            for _ in range(2):
                await bus.publish(queue, body, properties)
        await refused.reach(22)

    assert set(refused) == {"call token was used before; every call needs a token of its own"}
    # Every call ran exactly once, on whichever replica took it, replays included.
    assert sorted(deployment.runs.values()) == [1] * 11, deployment.runs


class Collected(list[T]):
    """A list that a waiter can wait on to reach a length."""

    def __init__(self) -> None:
        super().__init__()
        self._grew = anyio.Event()

    def add(self, item: T) -> None:
        self.append(item)
        self._grew.set()
        self._grew = anyio.Event()

    async def reach(self, length: int, seconds: float = 10.0) -> None:
        with anyio.fail_after(seconds):
            while len(self) < length:
                await self._grew.wait()


async def capture(
    subscription: Subscription, queue: str, into: Collected[tuple[str, bytes, dict[str, str]]]
) -> None:
    async for delivery in subscription:
        into.add((queue, delivery.body, dict(delivery.properties)))


async def refusals(subscription: Subscription, into: Collected[str]) -> None:
    async for delivery in subscription:
        answer = decode_response(delivery.body)
        if answer.error_type is not None:
            into.add(answer.error_message)
