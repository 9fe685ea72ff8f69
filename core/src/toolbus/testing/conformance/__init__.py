"""The bus conformance suite: one set of tests every adapter must pass.

Bind it to an adapter by subclassing :class:`BusConformance` in a test module and
providing a ``bus_factory`` fixture: an async callable returning a *new*
connection each time it is awaited (several connections stand for several
processes). Each test uses fresh queue names, so a broker can be shared by the
whole session::

    class TestMyBus(BusConformance):
        @pytest.fixture
        def bus_factory(self, my_broker_url):
            return lambda: connect(my_broker_url)

Subclasses may override :attr:`settle_timeout` (seconds any single wait may take)
for brokers whose consumer groups take a while to form.

The suite is pytest tests: install it with ``pip install 'toolbus[testing]'``.
"""

from __future__ import annotations

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the bus conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.testing.conformance.binding import (
    FOUR_MB,
    BoundBus,
    BusFactory,
    echo_service,
    fresh_queue,
    next_delivery,
)
from toolbus.testing.conformance.calls import CallsOverTheBus
from toolbus.testing.conformance.delivery import Collector, DeliveryRules


@pytest.mark.anyio
class BusConformance(DeliveryRules, CallsOverTheBus):
    """The delivery rules of docs/wire-protocol.md, and tool calls end to end, on one adapter.

    The cases are grouped by what they hold an adapter to: :class:`DeliveryRules`
    (:mod:`~toolbus.testing.conformance.delivery`) and :class:`CallsOverTheBus`
    (:mod:`~toolbus.testing.conformance.calls`); the fixtures they share are
    :class:`BoundBus`'s.
    """


__all__ = [
    "FOUR_MB",
    "BoundBus",
    "BusConformance",
    "BusFactory",
    "CallsOverTheBus",
    "Collector",
    "DeliveryRules",
    "echo_service",
    "fresh_queue",
    "next_delivery",
]
