"""Real stores for the sealing tests: a NATS server (JetStream key-value) and a Redis server,
each shared by the module's tests (every test uses fresh names)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.nats.server import NatsServer
from tests.redis.server import RedisServer


@pytest.fixture(scope="session")
def sealing_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path_factory.mktemp("sealing-nats"))
    with server.running():
        yield server


@pytest.fixture(scope="session")
def sealing_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("sealing-redis"))
    with server.running():
        yield server
