"""The bus conformance suite bound to the in-memory bus."""

from __future__ import annotations

import uuid

import pytest

from toolbus.memory.bus import connect
from toolbus.testing.conformance import BusConformance, BusFactory


class TestMemoryBus(BusConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def bus_factory(self) -> BusFactory:
        url = f"memory://conformance-{uuid.uuid4().hex}"
        return lambda: connect(url)
