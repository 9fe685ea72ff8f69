"""Held sessions in a state store: :class:`StoredHolder`, so that any replica serves any request.

A :class:`~toolbus.application.doors.holding.SessionHolder` on a
:class:`~toolbus.ports.StateStore` (NATS key-value, Redis; ``memory://`` for
tests). Every replica of a door given the same store sees the same sessions:
a call resumes the session whatever replica opened it, and a replica that
dies takes nothing with it.

What is kept, in the namespace ``door-sessions`` (:data:`NAMESPACE`):

* each held session under ``<kind>/<owner length>:<owner>/<id>`` (the length
  keeps one user's keys from ever meeting another's), as JSON: the session
  (:class:`~toolbus.application.agent.held.HeldSession`), when it was last
  used, its version (the door's count of moves) and when its idle time runs
  out (``until``), on the wall clock every replica shares;
* the ids each owner holds of each kind (``owners/<kind>/<owner>``): what the
  per-user limits count, and what the idle sweep walks;
* the owners who ever held anything (``owners``), so that a replica sweeping
  for idle sessions finds them all.

The session's version is the door's own count, kept in the value; a write is
a compare-and-set on the store's version of the key as last read by this
process, so two replicas never both move one session from the same point
(the second one's compare-and-set fails, and the door merges its calls into
what the first kept). The store's time to live is the idle time and a grace
(:data:`GRACE`): a session nobody sweeps (every replica down) leaves the
store by itself, while the sweep, on any replica, takes out what has idled
so that its audit record is written once.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter

from toolbus.application.agent.held import HeldSession
from toolbus.application.doors.holding import Held, HeldKey
from toolbus.ports import StateEntry, StateStore

log = logging.getLogger("toolbus.doors")

#: The state store namespace held sessions live in.
NAMESPACE = "door-sessions"
#: Seconds a held session stays in the store after its idle time ran out, for a
#: sweep to find it and write its record (after that, the store drops it).
GRACE = 3600.0
#: Tries of an index update that other replicas keep overtaking.
INDEX_TRIES = 16

#: Calls a session held here keeps in its record before the record is written
#: (unless ``calls-per-record`` is set lower): the record travels with the
#: session on every call, so it is kept short.
MAX_CALLS_HELD = 100

_OWNERS = "owners"


@dataclass(frozen=True, slots=True)
class _Stored:
    """A held session as the store keeps it (``until``: when its idle time runs out)."""

    session: HeldSession
    last_used: float
    version: int
    until: float


_STORED: TypeAdapter[_Stored] = TypeAdapter(_Stored)


def session_key(key: HeldKey) -> str:
    """The store key of one held session (one-to-one: the owner's length is in it)."""
    return f"{key.kind}/{len(key.owner)}:{key.owner}/{key.id}"


def _index_key(owner: str, kind: str) -> str:
    return f"owners/{kind}/{owner}"


class StoredHolder:
    """A :class:`~toolbus.application.doors.holding.SessionHolder` on a state store.

    Args:
        store: the store every replica of the door shares.
        clock: wall-clock seconds (replicas compare each other's times, so not
            a monotonic clock).
        namespace: where in the store (default :data:`NAMESPACE`).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.time,
        namespace: str = NAMESPACE,
    ) -> None:
        self.store = store
        self.clock = clock
        self.namespace = namespace
        #: Per session key: the store's version last read or written here, what it
        #: holds and its ``until``, so that a compare-and-set needs no read first and
        #: a read of an unchanged session no parsing.
        self._seen: dict[HeldKey, tuple[int, Held, float]] = {}

    # ------------------------------------------------------------------ sessions

    async def get(self, key: HeldKey) -> Held | None:
        entry = await self.store.get(self.namespace, session_key(key))
        if entry is None:
            self._seen.pop(key, None)
            return None
        held, until = self._read(key, entry)
        if until <= self.clock():
            return None  # idle too long: the sweep writes its record
        return held

    async def put(self, held: Held, *, ttl: float) -> bool:
        value, until = self._value(held, ttl)
        version = await self.store.create(
            self.namespace, session_key(held.key), value, ttl=ttl + GRACE
        )
        if version is None:
            found = await self.get(held.key)
            if found is not None:
                return False
            # Idled out but not swept yet: take its place once its record is written.
            await self._sweep_one(held.key)
            value, until = self._value(held, ttl)
            version = await self.store.create(
                self.namespace, session_key(held.key), value, ttl=ttl + GRACE
            )
            if version is None:
                return False
        self._seen[held.key] = (version, held, until)
        await self._index(held.key.owner, held.key.kind, add=held.key.id)
        return True

    async def swap(self, held: Held, *, ttl: float) -> bool:
        seen = self._seen.get(held.key)
        if seen is None or seen[1].version != held.version - 1:
            current = await self.get(held.key)
            if current is None or current.version != held.version - 1:
                return False
            seen = self._seen[held.key]
        value, until = self._value(held, ttl)
        version = await self.store.update(
            self.namespace, session_key(held.key), value, version=seen[0], ttl=ttl + GRACE
        )
        if version is None:
            self._seen.pop(held.key, None)
            return False
        self._seen[held.key] = (version, held, until)
        return True

    async def delete(self, key: HeldKey) -> Held | None:
        entry = await self.store.get(self.namespace, session_key(key))
        self._seen.pop(key, None)
        if entry is None:
            await self._index(key.owner, key.kind, remove=key.id)
            return None
        held, _ = self._read(key, entry)
        if not await self.store.delete(self.namespace, session_key(key), version=entry.version):
            return None  # another replica closed (or moved) it first: theirs to report
        await self._index(key.owner, key.kind, remove=key.id)
        return held

    async def owned(self, owner: str, kind: str) -> list[Held]:
        found = []
        for id_ in await self._ids(owner, kind):
            held = await self.get(HeldKey(owner, kind, id_))
            if held is not None:
                found.append(held)
        return found

    async def expired(self) -> list[Held]:
        """Take out every idled session in the store; each is reported by one replica only."""
        entry = await self.store.get(self.namespace, _OWNERS)
        owners: list[list[str]] = [] if entry is None else json.loads(entry.value)
        taken = []
        for kind, owner in owners:
            for id_ in await self._ids(owner, kind):
                held = await self._sweep_one(HeldKey(owner, kind, id_))
                if held is not None:
                    taken.append(held)
        return taken

    async def count(self, kind: str | None = None) -> int:
        """How many sessions (of ``kind``, else of every kind) the store holds, for every
        replica: what the indexes list, so a session that idled out counts until a sweep
        takes it out."""
        entry = await self.store.get(self.namespace, _OWNERS)
        owners: list[list[str]] = [] if entry is None else json.loads(entry.value)
        total = 0
        for held_kind, owner in owners:
            if kind is None or held_kind == kind:
                total += len(await self._ids(owner, held_kind))
        return total

    async def _sweep_one(self, key: HeldKey) -> Held | None:
        """Take ``key`` out if it idled out (or left the store); the held session if it
        was this call that took it out."""
        entry = await self.store.get(self.namespace, session_key(key))
        if entry is None:
            await self._index(key.owner, key.kind, remove=key.id)
            return None
        held, until = self._read(key, entry)
        if until > self.clock():
            return None
        if not await self.store.delete(self.namespace, session_key(key), version=entry.version):
            return None
        self._seen.pop(key, None)
        await self._index(key.owner, key.kind, remove=key.id)
        return held

    # ------------------------------------------------------------------ data

    def _value(self, held: Held, ttl: float) -> tuple[bytes, float]:
        """What the store keeps of ``held``, and when its idle time runs out."""
        until = self.clock() + ttl
        stored = _Stored(held.session, held.last_used, held.version, until)
        return _STORED.dump_json(stored, by_alias=True), until

    def _read(self, key: HeldKey, entry: StateEntry) -> tuple[Held, float]:
        seen = self._seen.get(key)
        if seen is not None and seen[0] == entry.version:
            return seen[1], seen[2]  # the store's version names one value: no parsing
        stored = _STORED.validate_json(entry.value)
        held = Held(key, stored.session, stored.last_used, stored.version)
        self._seen[key] = (entry.version, held, stored.until)
        return held, stored.until

    # ------------------------------------------------------------------ indexes

    async def _ids(self, owner: str, kind: str) -> list[str]:
        entry = await self.store.get(self.namespace, _index_key(owner, kind))
        return [] if entry is None else list(json.loads(entry.value))

    async def _index(
        self, owner: str, kind: str, *, add: str | None = None, remove: str | None = None
    ) -> None:
        """Add or remove one id of an owner's index (a first id adds the owner to the list)."""
        key = _index_key(owner, kind)
        for _ in range(INDEX_TRIES):
            entry = await self.store.get(self.namespace, key)
            ids: list[str] = [] if entry is None else json.loads(entry.value)
            if add is not None:
                if add in ids:
                    return
                ids.append(add)
            elif remove is None or remove not in ids:
                return
            else:
                ids.remove(remove)
            if entry is None:
                done = await self.store.create(self.namespace, key, _json(ids)) is not None
                if done:
                    await self._add_owner(owner, kind)
            else:
                written = await self.store.update(
                    self.namespace, key, _json(ids), version=entry.version
                )
                done = written is not None
            if done:
                return
        log.warning("could not update the held-session index of %s/%s: too busy", kind, owner)

    async def _add_owner(self, owner: str, kind: str) -> None:
        """Add the owner to the list the sweep walks. Owners stay listed (an empty index
        costs one read a sweep), so that no race between replicas can drop one."""
        pair = [kind, owner]
        for _ in range(INDEX_TRIES):
            entry = await self.store.get(self.namespace, _OWNERS)
            owners: list[list[str]] = [] if entry is None else json.loads(entry.value)
            if pair in owners:
                return
            owners.append(pair)
            if entry is None:
                done = await self.store.create(self.namespace, _OWNERS, _json(owners)) is not None
            else:
                written = await self.store.update(
                    self.namespace, _OWNERS, _json(owners), version=entry.version
                )
                done = written is not None
            if done:
                return
        log.warning("could not update the list of session owners: too busy")


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()
