"""Real redis-servers (Debian's package, started as our own processes) for the Redis tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.redis.server import RedisServer


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """One server for the whole session; tests use fresh namespaces."""
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    with server.running():
        yield server
