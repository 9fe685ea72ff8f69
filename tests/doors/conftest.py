"""The nats-server the doors' processes and the suite's tool service share."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def doors_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.nats.server import NatsServer

    server = NatsServer(tmp_path_factory.mktemp("doors-nats"))
    with server.running():
        yield server.url
