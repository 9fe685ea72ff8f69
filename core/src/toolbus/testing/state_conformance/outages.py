"""A store whose engine goes away and comes back works again, without a new connection."""

from __future__ import annotations

from contextlib import AsyncExitStack

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.domain.errors import StateStoreUnavailable
from toolbus.ports import StateEntry, WatchableStateStore
from toolbus.testing.state_conformance.binding import (
    BoundStore,
    Outage,
    eventually,
    fresh_namespace,
    next_state,
)


class Outages(BoundStore):
    """The engine stopped and started again (needs the ``outage`` fixture; else skipped)."""

    # -- the engine going away ----------------------------------------------------------

    async def test_a_store_works_again_once_its_server_is_back(
        self, outage: Outage | None, stack: AsyncExitStack
    ) -> None:
        if outage is None:
            pytest.skip("this store has no server of its own to lose")
        ns = fresh_namespace()
        store = await outage.connect()
        stack.push_async_callback(store.close)
        kept = await store.put(ns, "kept", b"before")
        watching = isinstance(store, WatchableStateStore)
        async with AsyncExitStack() as watches:
            changes = None
            if isinstance(store, WatchableStateStore):
                changes = await watches.enter_async_context(store.watch(ns, "watched"))
                assert await next_state(changes, self.settle_timeout) is None

            await outage.stop()
            with anyio.fail_after(self.settle_timeout * 3), pytest.raises(StateStoreUnavailable):
                await store.get(ns, "kept")
            await outage.start()

            async def readable() -> StateEntry | None:
                try:
                    return await store.get(ns, "kept")
                except StateStoreUnavailable:
                    return None

            # The same connection, with nothing done to it, works again.
            entry = await eventually(readable, self.settle_timeout * 3, "the store's return")
            assert entry == StateEntry(b"before", kept)
            if watching and changes is not None:
                other = await outage.connect()
                stack.push_async_callback(other.close)
                version = await other.put(ns, "watched", b"after")
                assert await next_state(changes, self.settle_timeout * 3) == StateEntry(
                    b"after", version
                )
