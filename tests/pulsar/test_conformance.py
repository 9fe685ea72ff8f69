"""The bus conformance suite bound to the Pulsar adapter, against pulsar-lite.

Bound through toolbus.connect(url), so the adapter is reached the way users reach
it: through its entry point.
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import pytest

import toolbus
from toolbus.testing.conformance import BusConformance, BusFactory

pytestmark = pytest.mark.broker

#: Pulsar stops dispatching to a consumer only when it closes, and on a non-persistent
#: topic drops what the consumer's client had taken ahead (receiver_queue_size): in some
#: runs, not in others, as the timing has it. Neither verdict is certain, so the two
#: rules that lose nothing are not held on non-persistent queues here (listed, with
#: this reason, in tests/ci_allowed_skips.txt).
MAY_DROP_PREFETCHED = (
    "Pulsar may drop a closing consumer's prefetched non-persistent messages, or not, by "
    "timing (docs/adapters/pulsar.md#rolling-out-a-service)"
)
PERSISTENCE = pytest.mark.parametrize(
    "persistent", [False, True], ids=["non-persistent", "persistent"]
)


class TestPulsarBus(BusConformance):
    settle_timeout = 10.0

    @pytest.fixture
    def bus_factory(self, pulsar_url: str) -> BusFactory:
        return lambda: toolbus.connect(pulsar_url)

    @PERSISTENCE
    async def test_a_member_that_stops_intake_hands_over_without_losing_a_message(
        self, connect: BusFactory, persistent: bool
    ) -> None:
        if not persistent:
            pytest.skip(MAY_DROP_PREFETCHED)
        await super().test_a_member_that_stops_intake_hands_over_without_losing_a_message(
            connect, persistent
        )

    @pytest.mark.slow
    @PERSISTENCE
    async def test_a_replica_rolled_out_under_load_loses_no_call(
        self, connect: BusFactory, stack: AsyncExitStack, persistent: bool
    ) -> None:
        if not persistent:
            pytest.skip(MAY_DROP_PREFETCHED)
        await super().test_a_replica_rolled_out_under_load_loses_no_call(connect, stack, persistent)
