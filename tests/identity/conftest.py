"""Signed calls on real buses: the in-memory bus and a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

import toolbus
from tests.nats.server import NatsServer
from toolbus.ports import Bus


@pytest.fixture(scope="session")
def identity_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(Path(tmp_path_factory.mktemp("nats-identity")))
    with server.running():
        yield server


@pytest.fixture(params=["memory", pytest.param("nats", marks=pytest.mark.broker)])
async def bus(request: pytest.FixtureRequest) -> AsyncIterator[Bus]:
    nats = request.param == "nats"
    url = request.getfixturevalue("identity_nats").url if nats else "memory://"
    connected = await toolbus.connect(url)
    yield connected
    await connected.close()
