"""A session's event stream on one gateway replica sees the calls made through another.

Real parts: two ``toolbus gateway`` processes sharing the 3-node NATS cluster as
their broker and the state store (R3 key-value buckets, or Redis); the tools
served in the test's process. A client listens to the session's events on
replica A while every call goes through replica B, and B closes the session.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.nats.cluster import NatsCluster
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from tests.support.servers import LOOPBACK

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

HEADERS = {"Authorization": f"Bearer {ALICE_KEY}"}


async def events_of(response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
    """The (event, data) pairs of a Server-Sent-Event stream, as they come."""
    name = ""
    async for line in response.aiter_lines():
        if line.startswith("event:"):
            name = line.removeprefix("event:").strip()
        elif line.startswith("data:"):
            yield name, json.loads(line.removeprefix("data:").strip())


async def test_a_listener_on_one_replica_sees_calls_made_through_another(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    state, options = store_url
    deployment = Deployment(tmp_path, scaling_cluster.url(), state, options)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas())
        _, port_a = await stack.enter_async_context(deployment.door("gateway"))
        _, port_b = await stack.enter_async_context(deployment.door("gateway"))
        replica_a = await stack.enter_async_context(
            httpx.AsyncClient(base_url=f"http://{LOOPBACK}:{port_a}", headers=HEADERS)
        )
        replica_b = await stack.enter_async_context(
            httpx.AsyncClient(base_url=f"http://{LOOPBACK}:{port_b}", headers=HEADERS)
        )
        opened = await replica_b.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text
        session = opened.json()["session_id"]

        seen: list[tuple[str, Any]] = []
        with anyio.fail_after(60):
            async with replica_a.stream("GET", f"/v1/sessions/{session}/events") as stream:
                assert stream.status_code == 200
                events = events_of(stream)
                seen.append(await anext(events))  # the state it starts in: listening now
                for n, tool in enumerate(("step-in", "work")):
                    answer = await replica_b.post(
                        f"/v1/sessions/{session}/calls",
                        json={"name": tool, "arguments": {"n": n}, "tool_call_id": f"c{n}"},
                    )
                    assert answer.status_code == 200, answer.text
                    seen.append(await anext(events))
                closed = await replica_b.delete(f"/v1/sessions/{session}")
                assert closed.status_code == 200, closed.text
                seen.extend([event async for event in events])  # ends after "closed"

    assert seen[0] == ("state", {"session_id": session, "state": "undefined"})
    calls = [(data["tool_call_id"], data["status"], data["state"]) for _, data in seen[1:3]]
    assert [name for name, _ in seen[1:3]] == ["call", "call"]
    assert calls == [("c0", "ok", "working"), ("c1", "ok", "working")]
    assert seen[3:] == [("closed", {"session_id": session, "reason": "closed"})]
