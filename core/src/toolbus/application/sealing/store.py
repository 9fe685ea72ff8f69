"""A state store whose every value is sealed: :func:`sealed`.

The shared stores (NATS key-value, Redis) are outside the trust boundary:
whoever may reach the broker or Redis may read and write them. A front door
therefore seals everything it keeps there: each value is encrypted and
authenticated with AES-GCM (``cryptography``) under a seal key the doors
share (:mod:`toolbus.application.sealing.keys`), and *bound to where it is
kept*: the namespace and the key are authenticated with it, so a record
copied under another key (another user's session, another approval) does not
open. What the store holds is::

    0x01 | len(kid) | kid | nonce (12 bytes) | ciphertext and tag

A record that does not open (written by someone without the key, altered,
moved, sealed with a key this door lacks, or not sealed at all) is *refused*:
reported (:class:`RefusedRecord`, which the door logs, counts and audits),
copied aside into the namespace :data:`SET_ASIDE` for a while, removed from
its place, and read as absent. So it is never used, and never blocks its
owner: a per-user count or a sweep simply does not see it, and the owner's
next request starts afresh.

What sealing cannot stop: whoever writes the store can put back an older
sealed value of the same key (a rollback), or delete a value. Grants that
must not be used twice (an approval, a token's use) are therefore also
remembered where the store cannot reach (see the callers).
"""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from toolbus._internal.state_keys import check_value
from toolbus.application.sealing.keys import INSTALL_HINT, SealKey, SealKeyError, SealKeys
from toolbus.domain.errors import StateStoreError
from toolbus.ports import StateEntry, StateStore, WatchableStateStore

log = logging.getLogger("toolbus.state")

#: Where refused records are copied for an operator to look at.
SET_ASIDE = "refused-records"
#: Seconds a refused record stays set aside.
SET_ASIDE_TTL = 7 * 24 * 3600.0

_VERSION = 1
_NONCE = 12
_TAG = 16
_DOMAIN = b"toolbus-seal"


@dataclass(frozen=True, slots=True)
class RefusedRecord:
    """A value in the store that did not open: where it was, and why (never its content)."""

    namespace: str
    key: str
    reason: str


OnRefused = Callable[[RefusedRecord], None]


class Cipher:
    """AES-GCM under a set of seal keys, built once: :meth:`seal` binds a value to a
    namespace and a key, :meth:`open` checks both (what the sealed store does per record,
    and a tool service per input state it hands its caller)."""

    def __init__(self, keys: SealKeys) -> None:
        try:
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError as exc:
            raise SealKeyError(INSTALL_HINT) from exc
        self.keys = keys
        self._aead = {key.kid: AESGCM(key.secret) for key in keys.keys}
        self._headers = {key.kid: _header(key) for key in keys.keys}
        sealing = keys.sealing
        self._seal_header = self._headers[sealing.kid]
        self._seal_aead = self._aead[sealing.kid]
        #: Bytes a sealed value adds to the value it seals.
        self.overhead = len(self._seal_header) + _NONCE + _TAG

    def seal(self, namespace: str, key: str, value: bytes) -> bytes:
        nonce = os.urandom(_NONCE)
        header = self._seal_header
        sealed = self._seal_aead.encrypt(nonce, value, header + _binding(namespace, key))
        return header + nonce + sealed

    def open(self, namespace: str, key: str, data: bytes) -> bytes:
        """The value sealed in ``data`` for ``(namespace, key)``; ``ValueError`` saying why not."""
        if len(data) < 2 or data[0] != _VERSION:
            raise ValueError("it is not sealed (written by something without the seal key)")
        end = 2 + data[1]
        kid = data[2:end].decode("ascii", errors="replace")
        aead = self._aead.get(kid)
        if aead is None or len(data) < end + _NONCE + _TAG:
            raise ValueError(
                f"it is sealed with key {kid!r}, which this process does not have; if that "
                "is a key of yours, add it to seal-keys (keys rotate: see docs/state-stores.md)"
                if aead is None
                else "it is cut short"
            )
        nonce = data[end : end + _NONCE]
        try:
            return bytes(
                aead.decrypt(nonce, data[end + _NONCE :], data[:end] + _binding(namespace, key))
            )
        except Exception:  # cryptography's InvalidTag: altered, or moved from another key
            raise ValueError(
                "it does not verify: it was altered, or copied from another key"
            ) from None


def _header(key: SealKey) -> bytes:
    kid = key.kid.encode("ascii")
    return bytes((_VERSION, len(kid))) + kid


def _binding(namespace: str, key: str) -> bytes:
    """What a value is bound to: the namespace and the key, each with its length."""
    ns = namespace.encode("utf-8")
    k = key.encode("utf-8", errors="surrogatepass")
    return _DOMAIN + struct.pack(">HI", len(ns), len(k)) + ns + k


class SealedStore:
    """A :class:`~toolbus.ports.StateStore` that seals what it writes and opens what it reads.

    Made by :func:`sealed`; see the module docs. Closing it closes ``store``.
    """

    def __init__(
        self, store: StateStore, keys: SealKeys, *, on_refused: OnRefused | None = None
    ) -> None:
        self.store = store
        self._cipher = Cipher(keys)
        #: Told of every refused record (the door that uses the store logs, counts and
        #: audits it); without it, refusals are logged.
        self.on_refused = on_refused

    @property
    def keys(self) -> SealKeys:
        return self._cipher.keys

    @property
    def max_value_size(self) -> int | None:
        limit = self.store.max_value_size
        return None if limit is None else max(0, limit - self._cipher.overhead)

    def _seal(self, namespace: str, key: str, value: bytes) -> bytes:
        check_value(
            value,
            self.max_value_size,
            "raise the store's own limit (sealing adds a few bytes to each value), or store less",
        )
        return self._cipher.seal(namespace, key, bytes(value))

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        entry = await self.store.get(namespace, key)
        if entry is None:
            return None
        return await self._opened(namespace, key, entry)

    async def _opened(self, namespace: str, key: str, entry: StateEntry) -> StateEntry | None:
        try:
            return StateEntry(self._cipher.open(namespace, key, entry.value), entry.version)
        except ValueError as exc:
            await self._refuse(namespace, key, entry, str(exc))
            return None

    async def _refuse(self, namespace: str, key: str, entry: StateEntry, reason: str) -> None:
        """Report the record, copy it aside and take it out of its place."""
        refused = RefusedRecord(namespace, key, reason)
        if self.on_refused is not None:
            self.on_refused(refused)
        else:
            log.error("refused a record in the state store (%s %r): %s", namespace, key, reason)
        try:
            await self.store.put(
                SET_ASIDE, f"{namespace}/{key}@{entry.version}", entry.value, ttl=SET_ASIDE_TTL
            )
        except (StateStoreError, ValueError) as exc:
            log.warning("could not set the refused record aside: %s", exc)
        try:
            await self.store.delete(namespace, key, version=entry.version)
        except StateStoreError as exc:
            log.warning("could not take the refused record out of its place: %s", exc)

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        return await self.store.put(namespace, key, self._seal(namespace, key, value), ttl=ttl)

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        return await self.store.create(namespace, key, self._seal(namespace, key, value), ttl=ttl)

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        return await self.store.update(
            namespace, key, self._seal(namespace, key, value), version=version, ttl=ttl
        )

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        return await self.store.delete(namespace, key, version=version)

    async def close(self) -> None:
        await self.store.close()

    def __repr__(self) -> str:
        return f"SealedStore({self.store!r}, sealing with {self.keys.sealing.kid!r})"


class WatchableSealedStore(SealedStore):
    """A :class:`SealedStore` over a store that can watch: watches open what they see."""

    store: WatchableStateStore

    def watch(
        self, namespace: str, key: str
    ) -> AbstractAsyncContextManager[AsyncIterator[StateEntry | None]]:
        return self._watch(namespace, key)

    @asynccontextmanager
    async def _watch(
        self, namespace: str, key: str
    ) -> AsyncIterator[AsyncIterator[StateEntry | None]]:
        async with self.store.watch(namespace, key) as changes:
            yield self._opening(namespace, key, changes)

    async def _opening(
        self, namespace: str, key: str, changes: AsyncIterator[StateEntry | None]
    ) -> AsyncIterator[StateEntry | None]:
        async for entry in changes:
            yield None if entry is None else await self._opened(namespace, key, entry)


def sealed(
    store: StateStore, keys: SealKeys, *, on_refused: OnRefused | None = None
) -> SealedStore:
    """``store`` with every value sealed by ``keys`` (watchable if ``store`` is)."""
    kind: Any = WatchableSealedStore if isinstance(store, WatchableStateStore) else SealedStore
    result: SealedStore = kind(store, keys, on_refused=on_refused)
    return result
