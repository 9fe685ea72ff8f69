"""The bus conformance suite bound to the Pulsar adapter, against pulsar-lite."""

from __future__ import annotations

import pytest

from toolbus.testing.conformance import BusConformance, BusFactory
from toolbus_pulsar import connect

pytestmark = pytest.mark.broker


class TestPulsarBus(BusConformance):
    settle_timeout = 10.0

    @pytest.fixture
    def bus_factory(self, pulsar_url: str) -> BusFactory:
        return lambda: connect(pulsar_url)
