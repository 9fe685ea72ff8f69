"""Agent sessions held between HTTP requests: per-user limits and an idle timeout.

Each :class:`HeldSession` wraps an :class:`~toolbus.AgentSession` with its
owner, a lock (one call at a time, so state moves in order), when it was last
used, and a :class:`~toolbus_gateway.events.Topic` for its event stream. A
session is visible only to its owner: another user's id is "not found", which
reveals nothing about it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from toolbus import AgentSession
from toolbus_gateway.events import Event, Topic

log = logging.getLogger("toolbus.gateway")


class SessionLimit(Exception):
    """The user holds as many sessions as allowed (HTTP 429, with ``retry_after`` seconds)."""

    def __init__(self, user: str, limit: int, retry_after: int) -> None:
        super().__init__(
            f"user {user!r} already has {limit} open sessions, the most allowed; close one "
            f"(DELETE /v1/sessions/ID) or retry after {retry_after} s, when the idlest expires"
        )
        self.retry_after = retry_after


class SessionNotFound(LookupError):
    """No open session of this user has this id (HTTP 404)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"no open session {session_id!r}; it was closed, expired after being idle, "
            "or belongs to someone else. Open one with POST /v1/sessions"
        )


class SessionExists(Exception):
    """A session with this request id is open already (HTTP 409)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"a session with request id {session_id!r} is open already; "
            "use it, close it, or choose another request_id"
        )


@dataclass(eq=False)
class HeldSession:
    """One open session and what the gateway keeps beside it."""

    session: AgentSession
    last_used: float
    lock: anyio.Lock = field(default_factory=anyio.Lock)
    events: Topic = field(default_factory=Topic)

    @property
    def id(self) -> str:
        return self.session.request_id

    @property
    def user(self) -> str:
        return self.session.user


class SessionStore:
    """The open sessions, by id, with a limit per user and an idle timeout."""

    def __init__(
        self,
        *,
        idle_timeout: float,
        per_user: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.idle_timeout = idle_timeout
        self.per_user = per_user
        self._clock = clock
        self._held: dict[str, HeldSession] = {}

    def __len__(self) -> int:
        return len(self._held)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._held

    def count(self, user: str) -> int:
        return sum(1 for held in self._held.values() if held.user == user)

    def check_room(self, user: str) -> None:
        """Raise :class:`SessionLimit` when ``user`` may not open another session now."""
        mine = [held for held in self._held.values() if held.user == user]
        if len(mine) < self.per_user:
            return
        idlest = min(held.last_used for held in mine)
        wait = idlest + self.idle_timeout - self._clock()
        raise SessionLimit(user, self.per_user, max(1, math.ceil(wait)))

    def add(self, session: AgentSession) -> HeldSession:
        self.check_room(session.user)
        if session.request_id in self._held:
            raise SessionExists(session.request_id)
        held = HeldSession(session, self._clock())
        self._held[held.id] = held
        return held

    def get(self, user: str, session_id: str) -> HeldSession:
        held = self._held.get(session_id)
        if held is None or held.user != user:
            raise SessionNotFound(session_id)
        held.last_used = self._clock()
        return held

    async def close(self, held: HeldSession, reason: str = "closed") -> None:
        """Close the session (its audit record is written) and end its event stream."""
        if self._held.pop(held.id, None) is None:
            return
        try:
            with anyio.CancelScope(shield=True):
                await held.session.close()
        finally:
            held.events.close(Event("closed", {"session_id": held.id, "reason": reason}))

    async def expire_idle(self) -> list[str]:
        """Close the sessions idle for longer than the timeout; returns their ids."""
        now = self._clock()
        due = [h for h in self._held.values() if now - h.last_used >= self.idle_timeout]
        for held in due:
            # A call in progress is use: skip a session whose lock is taken.
            if held.lock.locked():
                continue
            log.info(
                "closing session %s of %r: idle for %.0f s",
                held.id,
                held.user,
                now - held.last_used,
            )
            await self.close(held, "idle")
        return [held.id for held in due]

    async def close_all(self) -> None:
        for held in list(self._held.values()):
            await self.close(held, "gateway stopping")

    async def run_expiry(self, interval: float | None = None) -> None:
        """Close idle sessions until cancelled, checking every ``interval`` seconds."""
        every = interval if interval is not None else max(0.5, min(self.idle_timeout / 4, 30.0))
        while True:
            await anyio.sleep(every)
            await self.expire_idle()
