"""The bus conformance suite bound to the in-memory bus.

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

import uuid

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory


class TestMemoryBus(BusConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def bus_factory(self) -> BusFactory:
        url = f"memory://conformance-{uuid.uuid4().hex}"
        return lambda: toolbus.connect(url)
