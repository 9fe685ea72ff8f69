"""One Tansu broker for the whole test session; tests keep apart by fresh topic and group names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kafka.broker import TANSU_OPTIONS, tansu_broker


@pytest.fixture(scope="session")
def kafka_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``host:port`` of a Tansu broker running for the session."""
    with tansu_broker(tmp_path_factory.mktemp("tansu")) as address:
        yield address


@pytest.fixture(scope="session")
def kafka_url(kafka_address: str) -> str:
    """A toolbus URL for the session's broker, with group timers fit for tests."""
    return f"kafka://{kafka_address}?{TANSU_OPTIONS}"
