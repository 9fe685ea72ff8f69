"""Brokers shared with TrustGraph (pulsar-lite, Tansu, RabbitMQ) and its releases' environments."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.kafka.broker import TANSU_OPTIONS, tansu_broker
from tests.pulsar.server import pulsar_lite_server
from tests.rabbitmq.server import rabbitmq_node


@pytest.fixture(scope="session")
def pulsar_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pulsar_lite_server(tmp_path_factory.mktemp("pulsar-lite")) as url:
        yield url


@pytest.fixture(scope="session")
def kafka_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with tansu_broker(tmp_path_factory.mktemp("tansu")) as address:
        yield address


@pytest.fixture(scope="session")
def rabbitmq_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with rabbitmq_node(tmp_path_factory.mktemp("rabbitmq")) as url:
        yield url


@pytest.fixture(scope="session")
def brokers(pulsar_url: str, kafka_address: str) -> dict[str, tuple[str, str]]:
    """Per broker: (toolbus URL, the address TrustGraph's peer is given)."""
    return {
        "pulsar": (pulsar_url, pulsar_url),
        "kafka": (f"kafka://{kafka_address}?{TANSU_OPTIONS}", f"kafka://{kafka_address}"),
    }


@pytest.fixture
def broker_addresses(request: pytest.FixtureRequest) -> Callable[[str], tuple[str, str]]:
    """``(toolbus URL, TrustGraph's address)`` of one broker, started on first use only."""

    def addresses(broker: str) -> tuple[str, str]:
        if broker == "rabbitmq":
            url = str(request.getfixturevalue("rabbitmq_url"))
            return url, url
        found: dict[str, tuple[str, str]] = request.getfixturevalue("brokers")
        return found[broker]

    return addresses
