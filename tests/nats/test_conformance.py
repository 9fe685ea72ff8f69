"""The bus conformance suite bound to the NATS adapter (core NATS and JetStream)."""

from __future__ import annotations

import pytest

from toolbus.testing.conformance import BusConformance, BusFactory
from toolbus_nats import connect

pytestmark = pytest.mark.broker


class TestNatsBus(BusConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def bus_factory(self, nats_url: str) -> BusFactory:
        return lambda: connect(nats_url)
