"""The state store conformance suite bound to the in-memory store, through its entry point,
on a clock the tests move."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest

from toolbus.memory import state
from toolbus.plugins import connect_state
from toolbus.testing.state_conformance import StateStoreConformance, StoreFactory


class ManualClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class TestMemoryStateStore(StateStoreConformance):
    settle_timeout = 5.0

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest.fixture
    def store_factory(self, clock: ManualClock) -> StoreFactory:
        url = f"memory://conformance-{uuid.uuid4().hex}?max_value_size=8388608"

        async def open_store() -> state.MemoryStateStore:
            # The first connection sets the clock; the rest come through the entry point.
            store = await state.connect(url, clock=clock)
            await store.close()
            found = await connect_state(url)
            assert isinstance(found, state.MemoryStateStore)
            return found

        return open_store

    @pytest.fixture
    def advance_clock(self, clock: ManualClock) -> Callable[[float], None]:
        return clock.advance
