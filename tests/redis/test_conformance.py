"""The state store conformance suite bound to Redis, through the store's entry point."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest

from tests.redis.server import RedisServer
from tests.support.servers import stop_process
from toolbus.plugins import connect_state
from toolbus.testing.state_conformance import Outage, StateStoreConformance, StoreFactory

pytestmark = pytest.mark.broker


class TestRedisStateStore(StateStoreConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def store_factory(self, redis_server: RedisServer) -> StoreFactory:
        # A limit the value-limit test can exceed (Redis's own is 512 MB).
        url = f"{redis_server.url}/0?max_value_size=8388608"
        return lambda: connect_state(url)

    @pytest.fixture
    async def outage(self, tmp_path: Path) -> AsyncIterator[Outage]:
        server = RedisServer(tmp_path)
        running = server.running()
        process = running.__enter__()
        url = f"{server.url}?timeout=1"

        async def stop() -> None:
            await anyio.to_thread.run_sync(stop_process, process)

        async def start() -> None:
            nonlocal running, process
            running = server.running()
            process = await anyio.to_thread.run_sync(running.__enter__)

        try:
            yield Outage(connect=lambda: connect_state(url), stop=stop, start=start)
        finally:
            running.__exit__(None, None, None)
