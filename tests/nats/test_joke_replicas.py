"""Three ``toolbus serve joke-service`` processes on one NATS queue, as in production.

A plain nats-py client that knows nothing of toolbus calls them the TrustGraph
way, and 3,000 calls through the toolbus client are each answered exactly once,
with every process doing some of the work.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest

from tests.nats.processes import serve_many
from tests.nats.server import NatsServer
from toolbus import ToolServiceClient
from toolbus_joke import joke_service, tell_joke
from toolbus_nats import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

REPLICAS = 3
CALLS = 3000


@pytest.fixture(scope="module")
async def joke_replicas(
    nats_server: NatsServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[list[str]]:
    """Connection names of three running ``toolbus serve joke-service`` processes."""
    names = [f"joke-replica-{i}-{uuid.uuid4().hex[:6]}" for i in range(REPLICAS)]
    brokers = [f"{nats_server.url}?name={name}" for name in names]
    workdir = tmp_path_factory.mktemp("joke-replicas")
    async with serve_many(["joke-service"], brokers, workdir=workdir):
        yield names


async def test_a_plain_nats_client_gets_the_joke_service_answer(
    nats_server: NatsServer, joke_replicas: list[str]
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        replies = await nc.subscribe("tg.response.joke")
        await nc.flush()
        call_id = str(uuid.uuid4())
        body = json.dumps(
            {
                "user": "alice",
                "config": json.dumps({"style": "pun"}),
                "arguments": json.dumps({"topic": "programming"}),
            }
        ).encode()
        await nc.publish("tg.request.joke", body, headers={"id": call_id})
        with anyio.fail_after(10):
            reply = await replies.next_msg(timeout=10)
        assert reply.headers is not None and reply.headers["id"] == call_id
        expected = tell_joke("alice", "programming", "pun")
        # Byte for byte what TrustGraph's own json.dumps would write.
        assert (
            reply.data
            == json.dumps({"error": None, "response": expected, "end_of_stream": True}).encode()
        )
    finally:
        await nc.close()


async def test_three_replicas_share_3000_calls_each_answered_once(
    nats_server: NatsServer, nats_url: str, joke_replicas: list[str], tmp_path: Path
) -> None:
    def delivered_to_replicas() -> dict[str, int]:
        found = {c.get("name"): c["out_msgs"] for c in nats_server.connections()}
        return {name: found[name] for name in joke_replicas}

    before = delivered_to_replicas()
    bus, watcher = await connect(nats_url), await connect(nats_url)
    try:
        # Every answer on the response queue, whoever it is for.
        answers = await watcher.subscribe(joke_service.response_queue)
        seen: Counter[str] = Counter()
        marker_seen = anyio.Event()
        async with ToolServiceClient(bus) as client, anyio.create_task_group() as tasks:

            async def count() -> None:
                async for delivery in answers:
                    seen[delivery.properties["id"]] += 1
                    if delivery.properties["id"] == "marker":
                        marker_seen.set()

            tasks.start_soon(count)

            async def one(i: int) -> None:
                answer = await client.call(
                    request_queue=joke_service.request_queue,
                    response_queue=joke_service.response_queue,
                    user=f"user-{i}",
                    arguments={"topic": "cats"},
                    timeout=60,
                )
                assert answer.startswith(f"Hey user-{i}!")

            with anyio.fail_after(120):
                async with anyio.create_task_group() as calls:
                    for i in range(CALLS):
                        calls.start_soon(one, i)
            # A marker after the last answer: a late duplicate would show before it.
            await bus.publish(joke_service.response_queue, b"{}", {"id": "marker"})
            with anyio.fail_after(10):
                await marker_seen.wait()
            tasks.cancel_scope.cancel()
    finally:
        await bus.close()
        await watcher.close()

    del seen["marker"]
    assert len(seen) == CALLS and set(seen.values()) == {1}
    work = {name: after - before[name] for name, after in delivered_to_replicas().items()}
    assert sum(work.values()) == CALLS, work  # each request reached one replica
    assert all(done > 0 for done in work.values()), work  # and every replica did some
