"""The state store conformance suite bound to NATS JetStream key-value buckets.

Bound through toolbus.plugins.connect_state(url), so the store is reached the
way users reach it: through its entry point.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TypeVar

import anyio
import pytest

from tests.nats.cluster import NatsCluster
from tests.nats.server import NatsServer
from tests.support.servers import Restartable
from toolbus.domain.errors import StateStoreUnavailable
from toolbus.plugins import connect_state
from toolbus.ports import StateEntry
from toolbus.testing.state_conformance import (
    Outage,
    StateStoreConformance,
    StoreFactory,
    eventually,
)
from toolbus_nats.state import NatsStateStore

T = TypeVar("T")

pytestmark = pytest.mark.broker


class TestNatsStateStore(StateStoreConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def store_factory(self, nats_server: NatsServer) -> StoreFactory:
        # A bucket per test class run: nothing left by another test is seen.
        url = f"{nats_server.url}?bucket=conformance-{uuid.uuid4().hex[:8]}"
        return lambda: connect_state(url)

    @pytest.fixture
    def outage(self, tmp_path: Path) -> Iterator[Outage]:
        server = NatsServer(tmp_path)
        with Restartable(server.running) as running:
            url = f"{server.url}?timeout=1&reconnect_wait=0.1"
            yield Outage(connect=lambda: connect_state(url), stop=running.stop, start=running.start)


async def _retrying(operation: Callable[[], Awaitable[T]], timeout: float) -> T:
    """``operation``'s result once the store answers: while a bucket elects a leader it cannot."""

    async def attempt() -> T | None:
        try:
            return await operation()
        except StateStoreUnavailable:
            return None

    return await eventually(attempt, timeout, "an answer from the bucket")


@pytest.mark.anyio
@pytest.mark.slow
async def test_an_r3_bucket_keeps_its_state_when_the_leader_node_dies(
    nats_cluster: NatsCluster,
) -> None:
    options = {"replicas": 3, "timeout": 2, "reconnect_wait": 0.1, "randomize": "false"}
    writer = await connect_state(nats_cluster.url(0, **options))
    reader = await connect_state(nats_cluster.url(2, **options))
    try:
        assert isinstance(writer, NatsStateStore)
        status = await writer.kv.status()
        assert status.stream_info.config.num_replicas == 3
        version = await writer.put("gateway-sessions", "alice", b"turn-1")
        assert status.stream_info.cluster is not None and status.stream_info.cluster.leader
        leader = nats_cluster.node(status.stream_info.cluster.leader)

        leader.kill()

        entry = await _retrying(lambda: reader.get("gateway-sessions", "alice"), 30)
        assert entry == StateEntry(b"turn-1", version)

        async def second_turn() -> int | None:
            # A write whose answer was lost with the leader may have been kept:
            # as the docs say, read the key again before deciding.
            written = await writer.update("gateway-sessions", "alice", b"turn-2", version=version)
            if written is not None:
                return written
            entry = await reader.get("gateway-sessions", "alice")
            return entry.version if entry is not None and entry.value == b"turn-2" else None

        newer = await _retrying(second_turn, 30)
        assert await reader.get("gateway-sessions", "alice") == StateEntry(b"turn-2", newer)
        # A replica holding the version from before the failure is still refused.
        assert await reader.update("gateway-sessions", "alice", b"stale", version=version) is None
        await anyio.to_thread.run_sync(nats_cluster.restart, leader)
    finally:
        await writer.close()
        await reader.close()
