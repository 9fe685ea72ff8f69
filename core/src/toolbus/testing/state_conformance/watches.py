"""Watching a key: its current state first, then every change, from any connection."""

from __future__ import annotations

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.ports import StateEntry, WatchableStateStore
from toolbus.testing.state_conformance.binding import (
    BoundStore,
    StoreFactory,
    next_state,
)


class Watches(BoundStore):
    """``watch`` on stores that can watch (skipped on the others)."""

    # -- watching ---------------------------------------------------------------------

    async def _watchable(self, connect: StoreFactory) -> WatchableStateStore:
        store = await connect()
        if not isinstance(store, WatchableStateStore):
            pytest.skip("this store does not watch")
        return store

    async def test_a_watch_starts_with_the_current_state(
        self, connect: StoreFactory, ns: str
    ) -> None:
        store = await self._watchable(connect)
        async with store.watch(ns, "absent") as changes:
            assert await next_state(changes, self.settle_timeout) is None
        version = await store.put(ns, "present", b"now")
        async with store.watch(ns, "present") as changes:
            assert await next_state(changes, self.settle_timeout) == StateEntry(b"now", version)

    async def test_a_watch_sees_writes_and_deletes_from_other_connections(
        self, connect: StoreFactory, ns: str
    ) -> None:
        watcher = await self._watchable(connect)
        writer = await connect()
        async with watcher.watch(ns, "k") as changes:
            assert await next_state(changes, self.settle_timeout) is None
            # Live as the block starts: a write made at once is not missed.
            first = await writer.put(ns, "k", b"1")
            assert await next_state(changes, self.settle_timeout) == StateEntry(b"1", first)
            second = await writer.update(ns, "k", b"2", version=first)
            assert second is not None
            assert await next_state(changes, self.settle_timeout) == StateEntry(b"2", second)
            await writer.put(ns, "other", b"not watched")
            assert await writer.delete(ns, "k") is True
            assert await next_state(changes, self.settle_timeout) is None
            third = await writer.create(ns, "k", b"3")
            assert third is not None
            assert await next_state(changes, self.settle_timeout) == StateEntry(b"3", third)

    async def test_every_watch_of_a_key_gets_the_change(
        self, connect: StoreFactory, ns: str
    ) -> None:
        first, second = await self._watchable(connect), await self._watchable(connect)
        writer = await connect()
        async with first.watch(ns, "k") as one, second.watch(ns, "k") as two:
            assert await next_state(one, self.settle_timeout) is None
            assert await next_state(two, self.settle_timeout) is None
            version = await writer.put(ns, "k", b"both")
            assert await next_state(one, self.settle_timeout) == StateEntry(b"both", version)
            assert await next_state(two, self.settle_timeout) == StateEntry(b"both", version)

    async def test_a_watch_that_falls_behind_still_gets_the_latest_state(
        self, connect: StoreFactory, ns: str
    ) -> None:
        watcher = await self._watchable(connect)
        writer = await connect()
        async with watcher.watch(ns, "k") as changes:
            assert await next_state(changes, self.settle_timeout) is None
            for i in range(20):
                last = await writer.put(ns, "k", str(i).encode())
            state = await next_state(changes, self.settle_timeout)
            while state != StateEntry(b"19", last):
                assert state is not None, "a deletion was reported that never happened"
                state = await next_state(changes, self.settle_timeout)

    async def test_closing_the_store_ends_its_watches(self, connect: StoreFactory, ns: str) -> None:
        store = await self._watchable(connect)
        async with store.watch(ns, "k") as changes:
            assert await next_state(changes, self.settle_timeout) is None
            await store.close()
            with anyio.fail_after(self.settle_timeout), pytest.raises(StopAsyncIteration):
                await anext(changes)
