"""The bus conformance suite bound to the Kafka adapter, on a Tansu broker."""

from __future__ import annotations

import pytest

from toolbus.testing.conformance import BusConformance, BusFactory
from toolbus_kafka import connect

pytestmark = pytest.mark.broker


class TestKafkaBus(BusConformance):
    # Each group join costs Tansu about a second, and a rebalance a few more.
    settle_timeout = 15.0

    @pytest.fixture
    def bus_factory(self, kafka_url: str) -> BusFactory:
        return lambda: connect(kafka_url)
