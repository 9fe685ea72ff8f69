"""A real NATS server for the tests that need separate processes to talk to each other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def live_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a nats-server (JetStream on) shared by this directory's broker tests."""
    # Imported here, so that only the tests asking for a broker depend on the NATS kit.
    from tests.nats.server import NatsServer

    server = NatsServer(tmp_path_factory.mktemp("live-nats"))
    with server.running():
        yield server.url
