"""The bus conformance suite bound to the NATS adapter (core NATS and JetStream).

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory

pytestmark = pytest.mark.broker


class TestNatsBus(BusConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def bus_factory(self, nats_url: str) -> BusFactory:
        return lambda: toolbus.connect(nats_url)
