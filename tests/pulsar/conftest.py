"""The pulsar-lite broker every Pulsar test in the session shares."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pulsar.server import pulsar_lite_server


@pytest.fixture(scope="session")
def pulsar_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``pulsar://127.0.0.1:<port>`` of a pulsar-lite server with its data in a temp dir."""
    with pulsar_lite_server(tmp_path_factory.mktemp("pulsar-lite")) as url:
        yield url
