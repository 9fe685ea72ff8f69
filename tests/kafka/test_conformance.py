"""The bus conformance suite bound to the Kafka adapter, on a Tansu broker.

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory

pytestmark = pytest.mark.broker


class TestKafkaBus(BusConformance):
    # Each group join costs Tansu about a second, and a rebalance a few more.
    settle_timeout = 15.0

    @pytest.fixture
    def bus_factory(self, kafka_url: str) -> BusFactory:
        return lambda: toolbus.connect(kafka_url)
