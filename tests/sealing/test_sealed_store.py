"""A sealed store: the state store port kept whole, and nothing that did not come from a
door holding the key is ever read back."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.state.test_memory_conformance import ManualClock
from toolbus.application.sealing import (
    RefusedRecord,
    SealKeyError,
    SealKeys,
    load_seal_keys,
    new_seal_jwk,
    sealed,
)
from toolbus.application.sealing.keys import SealKey
from toolbus.application.sealing.store import SET_ASIDE, SealedStore, WatchableSealedStore
from toolbus.memory import state
from toolbus.ports import StateStore, WatchableStateStore
from toolbus.testing.state_conformance import StateStoreConformance, StoreFactory


def keys(*kids: str) -> SealKeys:
    return SealKeys(tuple(SealKey(kid, bytes([n]) * 32) for n, kid in enumerate(kids, 1)))


class TestSealedMemoryStore(StateStoreConformance):
    """Every promise of the port holds through the seal (values, versions, TTLs, watches)."""

    settle_timeout = 5.0

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest.fixture
    def store_factory(self, clock: ManualClock) -> StoreFactory:
        url = f"memory://sealed-{uuid.uuid4().hex}?max_value_size=8388608"

        async def open_store() -> StateStore:
            return sealed(await state.connect(url, clock=clock), keys("one"))

        return open_store

    @pytest.fixture
    def advance_clock(self, clock: ManualClock) -> Callable[[float], None]:
        return clock.advance


@pytest.fixture
async def raw() -> StateStore:
    return await state.connect(f"memory://raw-{uuid.uuid4().hex}")


@pytest.mark.anyio
async def test_the_store_holds_only_sealed_bytes(raw: StateStore) -> None:
    store = sealed(raw, keys("one"))
    await store.put("door-sessions", "alice", b'{"user": "alice", "groups": ["default"]}')
    held = await raw.get("door-sessions", "alice")
    assert held is not None
    assert b"alice" not in held.value and b"groups" not in held.value
    found = await store.get("door-sessions", "alice")
    assert found is not None and found.value == b'{"user": "alice", "groups": ["default"]}'


@pytest.mark.anyio
@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda value: b'{"user": "mallory", "groups": ["*"]}', id="written-plain"),
        pytest.param(lambda value: value[:-1] + bytes([value[-1] ^ 1]), id="one-bit-flipped"),
        pytest.param(lambda value: value[:30], id="cut-short"),
        pytest.param(lambda value: b"", id="emptied"),
    ],
)
async def test_a_forged_record_is_refused_set_aside_and_read_as_absent(
    raw: StateStore, forge: Callable[[bytes], bytes]
) -> None:
    refused: list[RefusedRecord] = []
    store = sealed(raw, keys("one"), on_refused=refused.append)
    await store.put("door-sessions", "alice", b'{"user": "alice"}')
    held = await raw.get("door-sessions", "alice")
    assert held is not None
    await raw.put("door-sessions", "alice", forge(held.value))

    assert await store.get("door-sessions", "alice") is None
    assert [(r.namespace, r.key) for r in refused] == [("door-sessions", "alice")]
    # Taken out of its place, so that it blocks nothing (a new session may take the key) ...
    assert await raw.get("door-sessions", "alice") is None
    assert await store.create("door-sessions", "alice", b'{"user": "alice"}') is not None
    # ... and kept aside for an operator.
    aside = await raw.get(SET_ASIDE, f"door-sessions/alice@{held.version + 1}")
    assert aside is not None and aside.value == forge(held.value)


@pytest.mark.anyio
async def test_a_record_copied_under_another_key_does_not_open(raw: StateStore) -> None:
    refused: list[RefusedRecord] = []
    store = sealed(raw, keys("one"), on_refused=refused.append)
    await store.put("door-sessions", "session/5:admin/1", b'{"user": "admin", "groups": ["*"]}')
    admins = await raw.get("door-sessions", "session/5:admin/1")
    assert admins is not None
    await raw.put("door-sessions", "session/5:alice/1", admins.value)  # another user's key
    await raw.put("approvals", "session/5:admin/1", admins.value)  # another namespace

    assert await store.get("door-sessions", "session/5:alice/1") is None
    assert await store.get("approvals", "session/5:admin/1") is None
    assert [r.reason for r in refused] == [
        "it does not verify: it was altered, or copied from another key"
    ] * 2
    assert await store.get("door-sessions", "session/5:admin/1") is not None


@pytest.mark.anyio
async def test_keys_rotate_without_dropping_what_the_old_key_sealed(raw: StateStore) -> None:
    before = sealed(raw, keys("old"))
    await before.put("approvals", "a1", b"sealed with the old key")
    during = sealed(raw, SealKeys((keys("old").keys[0], SealKey("new", b"\x09" * 32))))
    after = sealed(raw, SealKeys((SealKey("new", b"\x09" * 32), keys("old").keys[0])))
    await after.put("approvals", "a2", b"sealed with the new key")

    for store in (during, after):
        first = await store.get("approvals", "a1")
        assert first is not None and first.value == b"sealed with the old key"
        second = await store.get("approvals", "a2")
        assert second is not None and second.value == b"sealed with the new key"


@pytest.mark.anyio
async def test_a_record_sealed_with_an_unknown_key_names_the_key_and_the_fix(
    raw: StateStore,
) -> None:
    await sealed(raw, keys("seal-2027")).put("approvals", "a1", b"x")
    refused: list[RefusedRecord] = []
    assert (
        await sealed(raw, keys("seal-2026"), on_refused=refused.append).get("approvals", "a1")
        is None
    )
    assert "'seal-2027'" in refused[0].reason and "seal-keys" in refused[0].reason


@pytest.mark.anyio
async def test_a_watch_opens_what_it_sees_and_refuses_a_forgery(raw: StateStore) -> None:
    refused: list[RefusedRecord] = []
    store = sealed(raw, keys("one"), on_refused=refused.append)
    assert isinstance(store, WatchableSealedStore) and isinstance(raw, WatchableStateStore)
    async with store.watch("approvals", "a1") as changes:
        assert await anext(changes) is None
        await store.put("approvals", "a1", b'{"status": "pending"}')
        entry = await anext(changes)
        assert entry is not None and entry.value == b'{"status": "pending"}'
        await raw.put("approvals", "a1", b'{"status": "approved"}')
        assert await anext(changes) is None
    assert [r.key for r in refused] == ["a1"]


@pytest.mark.anyio
async def test_the_value_limit_counts_the_seal(raw: StateStore) -> None:
    store = sealed(raw, keys("one"))
    limit = raw.max_value_size
    assert limit is not None and store.max_value_size is not None
    assert store.max_value_size == limit - (2 + len("one") + 12 + 16)


def test_a_store_that_cannot_watch_stays_one_that_cannot() -> None:
    class Plain:
        max_value_size = None

    store = sealed(Plain(), keys("one"))  # type: ignore[arg-type]
    assert type(store) is SealedStore and not isinstance(store, WatchableStateStore)


# ---------------------------------------------------------------- keys


def test_keys_load_from_files_and_the_environment_in_order(tmp_path: Path) -> None:
    first, second = new_seal_jwk("seal-b"), new_seal_jwk("seal-a")
    (tmp_path / "b.jwk").write_text(json.dumps(first))
    loaded = load_seal_keys(
        ["b.jwk", "env:OLD_SEAL"], base_dir=tmp_path, environ={"OLD_SEAL": json.dumps(second)}
    )
    assert [key.kid for key in loaded.keys] == ["seal-b", "seal-a"]
    assert loaded.sealing.kid == "seal-b"
    assert "***" in repr(loaded.sealing) and first["k"] not in repr(loaded)


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"kty": "oct", "alg": "HS256", "kid": "s", "k": "A" * 43}, "is not a seal key"),
        ({"kty": "oct", "alg": "A256GCM", "k": "A" * 43}, "must name its kid"),
        ({"kty": "oct", "alg": "A256GCM", "kid": "s", "k": "AAAA"}, "must hold 32 bytes"),
        ("not json", "does not hold JSON"),
    ],
)
def test_a_bad_key_is_named_with_the_fix_and_never_shown(
    tmp_path: Path,
    document: object,
    expected: str,
) -> None:
    (tmp_path / "k.jwk").write_text(document if isinstance(document, str) else json.dumps(document))
    with pytest.raises(SealKeyError, match=expected) as caught:
        load_seal_keys(["k.jwk"], base_dir=tmp_path)
    assert "A" * 43 not in str(caught.value)
    assert "toolbus keys new" in str(caught.value) or "kid" in str(caught.value)


def test_a_missing_source_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(SealKeyError, match="TOOLBUS_SEAL_KEY is not set"):
        load_seal_keys(["env:TOOLBUS_SEAL_KEY"], environ={})
    with pytest.raises(SealKeyError, match=r"cannot be read.*toolbus keys new"):
        load_seal_keys(["nowhere.jwk"], base_dir=tmp_path)


def test_two_keys_with_one_id_are_refused() -> None:
    with pytest.raises(SealKeyError, match="given twice"):
        SealKeys((SealKey("k", b"\x01" * 32), SealKey("k", b"\x02" * 32)))
