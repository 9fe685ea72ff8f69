"""``toolbus gateway --workers 2``: every worker reports the sessions the gateway holds,
counted in the state store where they are, whichever worker opened them."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx
import pytest

from tests.gateway.support import metric
from tests.nats.cluster import NatsCluster
from tests.redis.server import RedisServer
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from tests.scaling.test_gateway_workers import workers

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]


async def test_each_worker_counts_the_sessions_in_the_store(
    scaling_cluster: NatsCluster, scaling_redis: RedisServer, tmp_path: Path
) -> None:
    deployment = Deployment(
        tmp_path, scaling_cluster.url(), scaling_redis.url, {"prefix": "toolbus-figures"}
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1))
        door, port = await stack.enter_async_context(deployment.door("gateway", "--workers", "2"))
        # A connection per request: each is accepted by either worker.
        http = await stack.enter_async_context(
            httpx.AsyncClient(
                base_url=f"http://127.0.0.1:{port}",
                headers={"Authorization": f"Bearer {ALICE_KEY}"},
                limits=httpx.Limits(max_keepalive_connections=0),
                timeout=30,
            )
        )
        with anyio.fail_after(60):  # the second worker shows only by being there
            while True:
                if (
                    workers(door.process.pid) == 2
                    and (await http.get("/readyz")).status_code == 200
                ):
                    break
                await anyio.sleep(0.1)

        opened = await http.post("/v1/sessions", json={"groups": GROUPS})
        assert opened.status_code == 201, opened.text

        counts = []
        for _ in range(8):
            scraped = await http.get("/metrics")
            counts.append(metric(scraped.text, "toolbus_gateway_sessions_open"))
        assert counts == [1] * 8, counts
