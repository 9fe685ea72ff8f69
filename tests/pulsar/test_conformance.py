"""The bus conformance suite bound to the Pulsar adapter, against pulsar-lite.

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory

pytestmark = pytest.mark.broker


class TestPulsarBus(BusConformance):
    settle_timeout = 10.0

    @pytest.fixture
    def bus_factory(self, pulsar_url: str) -> BusFactory:
        return lambda: toolbus.connect(pulsar_url)
