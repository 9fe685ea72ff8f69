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

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TypeVar

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.domain.errors import StateKeyError, StateStoreUnavailable, StateValueTooLarge
from toolbus.ports import StateEntry, StateStore, WatchableStateStore

StoreFactory = Callable[[], Awaitable[StateStore]]
T = TypeVar("T")

#: The largest value limit the suite tries to exceed (a store allowing more is
#: bound with a lower ``max_value_size`` for the test).
LIMIT_TRIED = 16 * 1024 * 1024
#: The size of the large value every store must carry, or its limit if lower.
LARGE_VALUE = 4 * 1024 * 1024
#: How often a condition on a remote store is checked while waiting for it.
POLL_INTERVAL = 0.05

#: Keys that engines treat specially, and keys that a careless escaping would merge.
AWKWARD_KEYS = (
    "plain",
    "a.b",
    "a_b",
    "a-b",
    "a=b",
    "a=2Eb",
    "a/b",
    "a:b",
    "a b",
    "*",
    ">",
    "a.*.>",
    ".leading",
    "trailing.",
    "..",
    "tab\there",
    "line\nbreak",
    "naïve ünïcødé",
    "日本語",
    "🚀",
    "\x00nul",
    "%2E",
    "k" * 1000,
    "k" * 1001,
)


@dataclass(frozen=True, slots=True)
class Outage:
    """A store on a server the suite may stop and start again (same address, same data)."""

    connect: StoreFactory
    stop: Callable[[], Awaitable[None]]
    start: Callable[[], Awaitable[None]]


def fresh_namespace() -> str:
    return f"conformance-{uuid.uuid4().hex[:12]}"


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float, what: str) -> T:
    """The first non-``None`` result of ``check``, polled until ``timeout`` seconds pass.

    A remote store announces neither expiry nor its own return; asking it is the
    only way to see either.
    """
    with anyio.move_on_after(timeout):
        while True:
            found = await check()
            if found is not None:
                return found
            await anyio.sleep(POLL_INTERVAL)
    raise AssertionError(f"{what} did not happen within {timeout} s")


async def next_state(
    changes: AsyncIterator[StateEntry | None], timeout: float
) -> StateEntry | None:
    with anyio.fail_after(timeout):
        return await anext(changes)


@pytest.mark.anyio
class StateStoreConformance:
    """The rules of :class:`toolbus.ports.StateStore` (docs/state-stores.md) on one store."""

    #: Seconds any single wait may take.
    settle_timeout: float = 10.0
    #: Seconds of the TTLs the suite waits out when the clock cannot be moved.
    short_ttl: float = 1.0

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        raise NotImplementedError("bind the suite by overriding the 'store_factory' fixture")

    @pytest.fixture
    def advance_clock(self) -> Callable[[float], None] | None:
        return None

    @pytest.fixture
    def outage(self) -> Outage | None:
        return None

    @pytest.fixture
    async def stack(self) -> AsyncIterator[AsyncExitStack]:
        async with AsyncExitStack() as stack:
            yield stack

    @pytest.fixture
    def connect(self, store_factory: StoreFactory, stack: AsyncExitStack) -> StoreFactory:
        """A new connection, closed when the test ends."""

        async def open_store() -> StateStore:
            store = await store_factory()
            stack.push_async_callback(store.close)
            return store

        return open_store

    @pytest.fixture
    def ns(self) -> str:
        return fresh_namespace()

    async def _gone(
        self,
        store: StateStore,
        ns: str,
        key: str,
        advance_clock: Callable[[float], None] | None,
        ttl: float,
    ) -> None:
        """Wait until ``key``'s TTL of ``ttl`` seconds has run out, moving the clock if we may."""
        if advance_clock is not None:
            advance_clock(ttl)
            assert await store.get(ns, key) is None
            return

        async def absent() -> bool | None:
            return True if await store.get(ns, key) is None else None

        await eventually(absent, self.settle_timeout + ttl, f"expiry of {key!r}")

    # -- reading and writing ----------------------------------------------------------

    async def test_a_value_put_is_read_back_with_its_version(
        self, connect: StoreFactory, ns: str
    ) -> None:
        writer, reader = await connect(), await connect()
        version = await writer.put(ns, "k", b"hello")
        assert await reader.get(ns, "k") == StateEntry(b"hello", version)

    async def test_an_absent_key_reads_as_none(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        assert await store.get(ns, "never-written") is None

    async def test_every_write_gives_the_key_a_new_version(
        self, connect: StoreFactory, ns: str
    ) -> None:
        store = await connect()
        first = await store.put(ns, "k", b"1")
        second = await store.put(ns, "k", b"2")
        third = await store.update(ns, "k", b"3", version=second)
        assert third is not None
        assert len({first, second, third}) == 3
        assert await store.get(ns, "k") == StateEntry(b"3", third)

    async def test_create_writes_only_an_absent_key(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        version = await store.create(ns, "k", b"first")
        assert version is not None
        assert await store.create(ns, "k", b"second") is None
        assert await store.get(ns, "k") == StateEntry(b"first", version)

    async def test_update_needs_the_version_the_key_holds(
        self, connect: StoreFactory, ns: str
    ) -> None:
        mine, theirs = await connect(), await connect()
        seen = await mine.put(ns, "k", b"mine")
        newer = await theirs.update(ns, "k", b"theirs", version=seen)
        assert newer is not None
        # A writer holding the old version has been overtaken: it is refused.
        assert await mine.update(ns, "k", b"stale", version=seen) is None
        assert await mine.get(ns, "k") == StateEntry(b"theirs", newer)
        assert await mine.update(ns, "never-written", b"x", version=seen) is None
        assert await mine.get(ns, "never-written") is None

    async def test_delete_with_and_without_a_version(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        assert await store.delete(ns, "never-written") is True
        old = await store.put(ns, "k", b"1")
        new = await store.put(ns, "k", b"2")
        assert await store.delete(ns, "k", version=old) is False
        assert await store.get(ns, "k") == StateEntry(b"2", new)
        assert await store.delete(ns, "k", version=new) is True
        assert await store.get(ns, "k") is None
        assert await store.delete(ns, "k", version=new) is False
        await store.put(ns, "other", b"x")
        assert await store.delete(ns, "other") is True
        assert await store.get(ns, "other") is None

    async def test_a_deleted_key_can_be_created_again(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        first = await store.create(ns, "k", b"1")
        assert first is not None
        assert await store.delete(ns, "k", version=first) is True
        second = await store.create(ns, "k", b"2")
        assert second is not None and second != first
        assert await store.delete(ns, "k") is True
        assert await store.create(ns, "k", b"3") is not None
        entry = await store.get(ns, "k")
        assert entry is not None and entry.value == b"3"

    async def test_an_empty_value_is_a_value(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        version = await store.put(ns, "k", b"")
        assert await store.get(ns, "k") == StateEntry(b"", version)
        assert await store.create(ns, "k", b"x") is None

    # -- atomicity across connections ---------------------------------------------------

    async def test_of_concurrent_creates_from_two_connections_exactly_one_wins(
        self, connect: StoreFactory, ns: str
    ) -> None:
        left, right = await connect(), await connect()

        async def create(
            store: StateStore, key: str, value: bytes, outcomes: dict[bytes, int | None]
        ) -> None:
            outcomes[value] = await store.create(ns, key, value, ttl=60)

        for round_ in range(5):
            key = f"token-{round_}"
            outcomes: dict[bytes, int | None] = {}
            async with anyio.create_task_group() as tasks:
                for i in range(10):
                    tasks.start_soon(create, left, key, f"left-{i}".encode(), outcomes)
                    tasks.start_soon(create, right, key, f"right-{i}".encode(), outcomes)
            winners = [value for value, version in outcomes.items() if version is not None]
            assert len(winners) == 1, winners
            assert await left.get(ns, key) == StateEntry(winners[0], outcomes[winners[0]] or 0)

    async def test_compare_and_set_loses_no_update_under_concurrency(
        self, connect: StoreFactory, ns: str
    ) -> None:
        left, right = await connect(), await connect()
        await left.put(ns, "counter", b"0")
        writers, increments = 8, 5

        async def increment(store: StateStore) -> None:
            for _ in range(increments):
                while True:
                    entry = await store.get(ns, "counter")
                    assert entry is not None
                    value = str(int(entry.value) + 1).encode()
                    if await store.update(ns, "counter", value, version=entry.version):
                        break

        async with anyio.create_task_group() as tasks:
            for i in range(writers):
                tasks.start_soon(increment, left if i % 2 else right)
        final = await right.get(ns, "counter")
        assert final is not None and int(final.value) == writers * increments

    # -- time to live -----------------------------------------------------------------

    async def test_a_value_with_a_ttl_is_gone_once_it_runs_out(
        self,
        connect: StoreFactory,
        ns: str,
        advance_clock: Callable[[float], None] | None,
    ) -> None:
        store = await connect()
        version = await store.put(ns, "k", b"short-lived", ttl=self.short_ttl)
        assert await store.get(ns, "k") == StateEntry(b"short-lived", version)
        await self._gone(store, ns, "k", advance_clock, self.short_ttl)

    async def test_a_write_without_a_ttl_makes_the_key_permanent(
        self,
        connect: StoreFactory,
        ns: str,
        advance_clock: Callable[[float], None] | None,
    ) -> None:
        store = await connect()
        await store.put(ns, "kept", b"1", ttl=self.short_ttl)
        # Written after "kept" with the same TTL, so it cannot expire before
        # "kept" would have: once it is gone, "kept"'s first TTL is over too.
        await store.put(ns, "witness", b"1", ttl=self.short_ttl)
        version = await store.put(ns, "kept", b"2")
        await self._gone(store, ns, "witness", advance_clock, self.short_ttl)
        assert await store.get(ns, "kept") == StateEntry(b"2", version)

    async def test_a_key_can_be_created_again_once_its_ttl_ran_out(
        self,
        connect: StoreFactory,
        ns: str,
        advance_clock: Callable[[float], None] | None,
    ) -> None:
        # What a replay guard does: add a token id for its lifetime, refuse it meanwhile.
        store = await connect()
        assert await store.create(ns, "token", b"", ttl=self.short_ttl) is not None
        assert await store.create(ns, "token", b"") is None
        await self._gone(store, ns, "token", advance_clock, self.short_ttl)
        assert await store.create(ns, "token", b"again") is not None

    @pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
    async def test_a_ttl_that_is_not_a_positive_number_is_refused(
        self, connect: StoreFactory, ns: str, ttl: float
    ) -> None:
        store = await connect()
        with pytest.raises(ValueError, match="TTL"):
            await store.put(ns, "k", b"x", ttl=ttl)
        with pytest.raises(ValueError, match="TTL"):
            await store.create(ns, "k", b"x", ttl=ttl)
        assert await store.get(ns, "k") is None

    # -- values and keys ----------------------------------------------------------------

    async def test_a_large_value_round_trips_byte_for_byte(
        self, connect: StoreFactory, ns: str
    ) -> None:
        writer, reader = await connect(), await connect()
        limit = writer.max_value_size
        size = LARGE_VALUE if limit is None else min(LARGE_VALUE, limit)
        value = os.urandom(size)
        version = await writer.put(ns, "large", value)
        assert await reader.get(ns, "large") == StateEntry(value, version)

    async def test_a_value_over_the_limit_is_refused_and_nothing_is_written(
        self, connect: StoreFactory, ns: str
    ) -> None:
        store = await connect()
        limit = store.max_value_size
        if limit is None or limit > LIMIT_TRIED:
            pytest.skip("bind the suite with a max_value_size the test can exceed")
        with pytest.raises(StateValueTooLarge, match=f"{limit:,}"):
            await store.put(ns, "k", bytes(limit + 1))
        with pytest.raises(StateValueTooLarge):
            await store.create(ns, "k", bytes(limit + 1))
        assert await store.get(ns, "k") is None

    async def test_a_value_must_be_bytes(self, connect: StoreFactory, ns: str) -> None:
        store = await connect()
        with pytest.raises(TypeError, match="serialise"):
            await store.put(ns, "k", "text")  # type: ignore[arg-type]

    async def test_every_key_maps_to_a_place_of_its_own(
        self, connect: StoreFactory, ns: str
    ) -> None:
        writer, reader = await connect(), await connect()
        versions = {key: await writer.put(ns, key, key.encode()) for key in AWKWARD_KEYS}
        for key in AWKWARD_KEYS:
            assert await reader.get(ns, key) == StateEntry(key.encode(), versions[key]), key
        assert await writer.create(ns, "a=2Eb", b"x") is None
        assert await writer.delete(ns, "a.b") is True
        assert await reader.get(ns, "a=2Eb") == StateEntry(b"a=2Eb", versions["a=2Eb"])

    async def test_namespaces_keep_their_keys_apart(self, connect: StoreFactory) -> None:
        store = await connect()
        first, second = fresh_namespace(), fresh_namespace()
        await store.put(first, "k", b"first")
        assert await store.get(second, "k") is None
        assert await store.create(second, "k", b"second") is not None
        entry = await store.get(first, "k")
        assert entry is not None and entry.value == b"first"

    @pytest.mark.parametrize(
        "namespace", ["", "Upper", "9lives", "has space", "a.b", "a:b", "a_b", "n" * 65]
    )
    async def test_a_namespace_outside_the_rules_is_refused(
        self, connect: StoreFactory, namespace: str
    ) -> None:
        store = await connect()
        with pytest.raises(StateKeyError, match="namespace"):
            await store.get(namespace, "k")
        with pytest.raises(StateKeyError, match="namespace"):
            await store.put(namespace, "k", b"x")

    @pytest.mark.parametrize("key", ["", "lone \ud800 surrogate"], ids=["empty", "surrogate"])
    async def test_a_key_that_cannot_be_written_is_refused(
        self, connect: StoreFactory, ns: str, key: str
    ) -> None:
        store = await connect()
        with pytest.raises(StateKeyError, match="state key"):
            await store.put(ns, key, b"x")
        with pytest.raises(StateKeyError, match="state key"):
            await store.get(ns, key)

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
