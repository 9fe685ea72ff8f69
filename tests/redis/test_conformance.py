"""The state store conformance suite bound to Redis, through the store's entry point."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.redis.server import RedisServer
from tests.support.servers import Restartable
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
    def outage(self, tmp_path: Path) -> Iterator[Outage]:
        server = RedisServer(tmp_path)
        with Restartable(server.running) as running:
            url = f"{server.url}?timeout=1"
            yield Outage(connect=lambda: connect_state(url), stop=running.stop, start=running.start)
