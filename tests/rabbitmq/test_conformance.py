"""The bus conformance suite bound to the RabbitMQ adapter, on Debian's rabbitmq-server.

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory

pytestmark = pytest.mark.broker


class TestRabbitMQBus(BusConformance):
    settle_timeout = 10.0

    @pytest.fixture
    def bus_factory(self, rabbitmq_url: str) -> BusFactory:
        return lambda: toolbus.connect(rabbitmq_url)
