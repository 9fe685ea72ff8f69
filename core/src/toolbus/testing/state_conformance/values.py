"""Reading and writing: versions, compare-and-set across connections, time to live,
values and keys, as every state store must keep them."""

from __future__ import annotations

import os
from collections.abc import Callable

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.domain.errors import StateKeyError, StateValueTooLarge
from toolbus.ports import StateEntry, StateStore
from toolbus.testing.state_conformance.binding import (
    AWKWARD_KEYS,
    LARGE_VALUE,
    LIMIT_TRIED,
    BoundStore,
    StoreFactory,
    fresh_namespace,
)


class ReadsAndWrites(BoundStore):
    """``get``, ``put``, ``create``, ``update`` and ``delete``, their TTLs and limits."""

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
