"""Real nats-servers (JetStream on, in temp dirs) for the NATS adapter tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.nats.cluster import NatsCluster
from tests.nats.server import TEST_ACK_WAIT, NatsServer


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One server for the whole session; tests use fresh queue names."""
    server = NatsServer(tmp_path_factory.mktemp("nats"))
    with server.running():
        yield server


@pytest.fixture(scope="session")
def nats_url(nats_server: NatsServer) -> str:
    return f"{nats_server.url}?ack_wait={TEST_ACK_WAIT}"


@pytest.fixture
def own_nats_server(tmp_path: Path) -> NatsServer:
    """A server of the test's own (not started), for tests that stop and restart it."""
    return NatsServer(tmp_path)


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[NatsCluster]:
    """Three nodes routed into one cluster, JetStream on each; the test's own."""
    with NatsCluster(tmp_path / "cluster").running() as cluster:
        yield cluster
