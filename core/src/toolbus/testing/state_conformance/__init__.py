"""The state store conformance suite: one set of tests every state store must pass.

Bind it to a store by subclassing :class:`StateStoreConformance` in a test module
and providing a ``store_factory`` fixture: an async callable returning a *new*
connection each time it is awaited (several connections stand for several
replicas). Each test uses a fresh namespace, so a server can be shared by the
whole session::

    class TestMyStore(StateStoreConformance):
        @pytest.fixture
        def store_factory(self, my_server_url):
            return lambda: connect_state(my_server_url)

Two fixtures are optional:

* ``advance_clock``: a function moving the store's clock on by some seconds, for
  a store whose time can be injected; without it the TTL tests wait for real
  expiry of :attr:`StateStoreConformance.short_ttl`-second values, polling.
* ``outage``: an :class:`Outage`, a store on a server the suite may stop and
  start again; without it the outage test is skipped.

The value-limit test needs a store whose ``max_value_size`` is at most
:data:`LIMIT_TRIED`; bind the suite with a lower limit where the engine's own is
higher. The suite is pytest tests: install it with ``pip install 'toolbus[testing]'``.
"""

from __future__ import annotations

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.testing.state_conformance.binding import (
    AWKWARD_KEYS,
    LARGE_VALUE,
    LIMIT_TRIED,
    POLL_INTERVAL,
    BoundStore,
    Outage,
    StoreFactory,
    eventually,
    fresh_namespace,
    next_state,
)
from toolbus.testing.state_conformance.outages import Outages
from toolbus.testing.state_conformance.values import ReadsAndWrites
from toolbus.testing.state_conformance.watches import Watches


@pytest.mark.anyio
class StateStoreConformance(ReadsAndWrites, Watches, Outages):
    """The rules of :class:`toolbus.ports.StateStore` (docs/state-stores.md) on one store.

    The cases are grouped by what they hold a store to: :class:`ReadsAndWrites`,
    :class:`Watches` and :class:`Outages`; the fixtures they share are
    :class:`BoundStore`'s.
    """


__all__ = [
    "AWKWARD_KEYS",
    "LARGE_VALUE",
    "LIMIT_TRIED",
    "POLL_INTERVAL",
    "BoundStore",
    "Outage",
    "Outages",
    "ReadsAndWrites",
    "StateStoreConformance",
    "StoreFactory",
    "Watches",
    "eventually",
    "fresh_namespace",
    "next_state",
]
