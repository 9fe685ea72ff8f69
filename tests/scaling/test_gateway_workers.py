"""``toolbus gateway --workers 2`` with its sessions in a state store (Redis): the worker
processes share one address, and a session's calls on fresh connections, taken by
whichever worker accepts each, keep its state."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
import pytest

from tests.nats.cluster import NatsCluster
from tests.redis.server import RedisServer
from tests.scaling.deployment import ALICE_KEY, GROUPS, TEN_CALLS, Deployment

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]


def workers(pid: int) -> int:
    """How many worker processes the command ``pid`` runs (spawned children; not the
    resource tracker multiprocessing may start beside them)."""
    found = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    count = 0
    for child in found:
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
        except FileNotFoundError:
            continue  # gone meanwhile
        count += b"spawn_main" in command
    return count


async def test_workers_share_the_sessions_through_the_store(
    scaling_cluster: NatsCluster, scaling_redis: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(
        tmp_path, scaling_cluster.url(), scaling_redis.url, {"prefix": "toolbus-workers"}
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1))
        door, port = await stack.enter_async_context(deployment.door("gateway", "--workers", "2"))
        # Every request on a connection of its own, so each is accepted by either worker.
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {ALICE_KEY}"},
                limits=httpx.Limits(max_keepalive_connections=0),
                timeout=30,
            )
        )
        # The workers are the command's children; the port accepts once the first is up,
        # and a foreign process tells the rest only by what it shows.
        with anyio.fail_after(60):
            while True:
                if (
                    workers(door.process.pid) == 2
                    and (await http.get("/readyz")).status_code == 200
                ):
                    break
                await anyio.sleep(0.1)

        opened = await http.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text
        session = opened.json()["session_id"]
        for n, (tool, state_after) in enumerate(TEN_CALLS):
            answer = await http.post(
                f"/v1/sessions/{session}/calls",
                json={"name": tool, "arguments": {"n": n}, "tool_call_id": f"c{n}"},
            )
            assert answer.status_code == 200, answer.text
            assert answer.json()["state"] == state_after, answer.json()

        closed = await http.delete(f"/v1/sessions/{session}")
        assert closed.status_code == 200, closed.text
        calls = closed.json()["audit"]["calls"]
        assert [call["tool_call_id"] for call in calls] == [f"c{n}" for n in range(10)]
    assert sorted(deployment.runs.values()) == [1] * 10, deployment.runs
