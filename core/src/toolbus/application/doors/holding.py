"""Where a front door keeps the sessions it holds between requests: :class:`SessionHolder`.

What is held is plain data (:class:`Held`: a
:class:`~toolbus.application.agent.held.HeldSession` and when it was last
used), under a key that starts with its owner, so that one user's keys never
meet another's. The holder is a small interface a state store can implement
(get; put with a time to live; compare-and-set; delete; the keys of one
owner), so that any replica of a door can serve any request:
:class:`InProcessHolder` keeps them in this process,
:class:`~toolbus.application.doors.stored.StoredHolder` in a state store.

Holders never evict: a user beyond the limit is refused by the door
(:class:`~toolbus.domain.errors.LimitReached`), and a held session leaves when
it is closed or its time to live runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from toolbus.application.agent.held import HeldSession
from toolbus.domain.errors import ToolbusError


class HeldAlready(ToolbusError):
    """A session is held under this key already (a request id used twice, say)."""

    def __init__(self, key: HeldKey) -> None:
        self.key = key
        super().__init__(f"{key.kind} {key.id[:200]!r} is held already; use it or close it")


@dataclass(frozen=True, slots=True)
class HeldKey:
    """Whose, of which kind (``session``, ``workflow``, ``conversation``), and the id."""

    owner: str
    kind: str
    id: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.owner}/{self.id}"


@dataclass(frozen=True, slots=True)
class Held:
    """One held session: the session as data, when it was last used, and a version.

    ``version`` grows by one with every :meth:`SessionHolder.swap`; a swap that
    names an older version fails, so two replicas can never both move a session.
    """

    key: HeldKey
    session: HeldSession
    last_used: float
    version: int = 0

    def touched(self, now: float) -> Held:
        return replace(self, last_used=now)


class SessionHolder(Protocol):
    """Keeps held sessions; see the module docs."""

    #: The clock ``last_used`` is counted on: monotonic in one process, the wall
    #: clock where replicas share the sessions.
    clock: Callable[[], float]

    async def get(self, key: HeldKey) -> Held | None:
        """The held session, or ``None`` when there is none (closed, or expired)."""
        ...

    async def put(self, held: Held, *, ttl: float) -> bool:
        """Keep a new held session for ``ttl`` seconds; ``False`` if the key is taken."""
        ...

    async def swap(self, held: Held, *, ttl: float) -> bool:
        """Replace the session if it is still at ``held.version - 1``; ``False`` otherwise."""
        ...

    async def delete(self, key: HeldKey) -> Held | None:
        """Stop holding the session; what was held, if anything."""
        ...

    async def owned(self, owner: str, kind: str) -> list[Held]:
        """The sessions of one kind ``owner`` holds now."""
        ...

    async def expired(self) -> list[Held]:
        """Take out the sessions whose time to live has run out (to write their records)."""
        ...


class InProcessHolder:
    """A :class:`SessionHolder` in this process's memory, on an injected monotonic clock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._held: dict[HeldKey, tuple[Held, float]] = {}
        self._by_owner: dict[tuple[str, str], set[HeldKey]] = {}

    def __len__(self) -> int:
        return len(self._held)

    def all(self) -> list[Held]:
        """Every session held now (a stopping process closes them)."""
        return [held for key in list(self._held) if (held := self._live(key)) is not None]

    def _live(self, key: HeldKey) -> Held | None:
        found = self._held.get(key)
        if found is None or found[1] <= self.clock():
            return None
        return found[0]

    async def get(self, key: HeldKey) -> Held | None:
        return self._live(key)

    async def put(self, held: Held, *, ttl: float) -> bool:
        if self._live(held.key) is not None:
            return False
        self._store(held, ttl)
        return True

    async def swap(self, held: Held, *, ttl: float) -> bool:
        current = self._live(held.key)
        if current is None or current.version != held.version - 1:
            return False
        self._store(held, ttl)
        return True

    async def delete(self, key: HeldKey) -> Held | None:
        found = self._held.pop(key, None)
        if found is None:
            return None
        self._by_owner.get((key.owner, key.kind), set()).discard(key)
        return found[0]

    async def owned(self, owner: str, kind: str) -> list[Held]:
        keys = self._by_owner.get((owner, kind), set())
        return [held for key in list(keys) if (held := self._live(key)) is not None]

    async def expired(self) -> list[Held]:
        now = self.clock()
        due = [key for key, (_, until) in self._held.items() if until <= now]
        found = []
        for key in due:
            held = await self.delete(key)
            if held is not None:
                found.append(held)
        return found

    def _store(self, held: Held, ttl: float) -> None:
        self._held[held.key] = (held, self.clock() + ttl)
        self._by_owner.setdefault((held.key.owner, held.key.kind), set()).add(held.key)
