"""One RabbitMQ node for the whole test session; tests keep apart by fresh queue and group names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.rabbitmq.server import rabbitmq_node


@pytest.fixture(scope="session")
def rabbitmq_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The AMQP URL of a RabbitMQ node running for the session."""
    with rabbitmq_node(tmp_path_factory.mktemp("rabbitmq")) as url:
        yield url
