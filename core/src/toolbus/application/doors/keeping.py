"""Sessions a front door keeps between requests: :class:`HeldSessions`.

A gateway session, an MCP workflow or an agent conversation outlives the
request that opened it: the door keeps it as plain data
(:mod:`~toolbus.application.doors.holding`) under its user and a key, and each
request resumes it, calls, and keeps what it reached. Kept here, the same way
at every door:

* each user holds at most ``max-sessions-per-user`` (``max-workflows-per-user``)
  of a kind; one more is refused, saying when the idlest frees its place;
* two requests of one session that ran at once (on two replicas) both count:
  the later one's calls are added to what the first kept;
* the audit record so far is written when a call was refused and every
  ``calls-per-record`` calls, and when the session is released or idles out.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from typing import Protocol

from toolbus.application.agent.audit import AuditRecord, CallRecord, StateTransition
from toolbus.application.agent.held import HeldSession
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.holding import Held, HeldAlready, HeldKey, SessionHolder
from toolbus.application.doors.limits import check
from toolbus.application.doors.settings import DoorSettings
from toolbus.application.doors.stored import MAX_CALLS_HELD, StoredHolder

log = logging.getLogger("toolbus.doors")

#: Tries at keeping a request's calls on a session other requests keep moving.
MERGE_TRIES = 8

#: Kinds of held sessions, and the setting that limits each.
SESSION = "session"
WORKFLOW = "workflow"
CONVERSATION = "conversation"


class _Door(Protocol):
    """What of a front door keeping its sessions takes."""

    tools: Tools
    settings: DoorSettings
    holder: SessionHolder

    def resumed(self, held: HeldSession, *, counted: bool = False) -> AgentSession: ...

    async def closed(self, held: HeldSession) -> AuditRecord | None: ...


class HeldSessions:
    """The sessions one front door keeps between requests; see the module docs."""

    def __init__(self, door: _Door) -> None:
        self.door = door
        self.holder = door.holder
        self.settings = door.settings
        #: Seconds, for idleness: the holder's clock (monotonic in one process, the
        #: wall clock in a state store).
        self.clock = door.holder.clock
        #: Calls a held session's record takes before it is written (``calls-per-record``;
        #: a session held in a state store carries its record on every call, so there
        #: at most MAX_CALLS_HELD unless set lower).
        self.calls_per_record = self.settings.calls_per_record
        if isinstance(self.holder, StoredHolder) and "calls_per_record" not in (
            self.settings.model_fields_set
        ):
            self.calls_per_record = min(self.calls_per_record, MAX_CALLS_HELD)
        #: The session objects this process last used for held sessions, by key:
        #: (the version they reached, the session), reused while nothing moves them.
        self._live: dict[HeldKey, tuple[int, AgentSession]] = {}

    def resume(self, held: Held) -> AgentSession:
        """The session ``held`` describes, for one request.

        The session object this process used last for it, when nothing moved
        the session since (the same version, on the same configuration); else
        resumed from the data, as any process would.
        """
        live = self._live.get(held.key)
        if (
            live is not None
            and live[0] == held.version
            and live[1].registry is self.door.tools.registry
            and not live[1].closed
        ):
            return live[1]
        return self.door.resumed(held.session)

    def _limit(self, kind: str) -> int:
        if kind == WORKFLOW:
            return self.settings.max_workflows_per_user
        return self.settings.max_sessions_per_user

    async def check_room(self, user: str, kind: str) -> None:
        """:class:`~toolbus.domain.errors.LimitReached` when ``user`` holds the most of ``kind``."""
        owned = await self.holder.owned(user, kind)
        if len(owned) < self._limit(kind):
            return
        idlest = min(held.last_used for held in owned)
        wait = idlest + self.settings.session_idle_timeout - self.clock()
        check(kind + "s", user, len(owned), self._limit(kind), int(wait) + 1)

    async def hold(self, session: AgentSession, kind: str, key: str | None = None) -> Held:
        """Keep ``session`` (its data) for its user under ``key`` (default its request id)."""
        await self.check_room(session.user, kind)
        held = Held(
            HeldKey(session.user, kind, key or session.request_id),
            session.held(),
            self.clock(),
        )
        if not await self.holder.put(held, ttl=self.settings.session_idle_timeout):
            raise HeldAlready(held.key)
        return held

    async def get(self, user: str, kind: str, key: str) -> Held | None:
        """The session ``user`` holds under ``key``; another user's keys never match."""
        return await self.holder.get(HeldKey(user, kind, key))

    async def keep(self, held: Held, session: AgentSession) -> Held:
        """Store what ``session`` (resumed from ``held``) reached.

        The audit record so far is written, and a fresh one starts in the same
        state under the same request id, when a call was refused (a refusal is
        never kept waiting for the session to end) and every ``calls-per-record``
        calls (no record grows without bound).
        """
        data = session.held()
        # Only this request's calls: the earlier ones were looked at when they were made.
        made = data.calls[len(held.session.calls) :]
        moves = data.transitions[len(held.session.transitions) :]
        refused = any(call.status == "refused" for call in made)
        if refused or session.calls >= self.calls_per_record:
            await session.close()
            data = data.restarted(data.request_id, time.time())
            made, moves = (), ()  # in the record just written
        kept = Held(held.key, data, self.clock(), held.version + 1)
        if not await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
            self._live.pop(held.key, None)
            merged = await self._merge(held, data.state, made, moves)
            if merged is None:
                return held
            return merged
        if session.closed:  # its record was written: the next request resumes the data
            self._live.pop(held.key, None)
        else:
            self._live[held.key] = (kept.version, session)
        return kept

    async def _merge(
        self,
        held: Held,
        state: str,
        made: Sequence[CallRecord],
        moves: Sequence[StateTransition],
    ) -> Held | None:
        """Keep this request's calls on top of what another request kept meanwhile.

        Two requests of one session that ran at once (on two replicas, where no
        lock is shared) both started from ``held``; the one that finished first
        is kept, and this one's calls and transitions are added to it, its state
        taking over only if its calls moved the state. ``None``: the session was
        closed meanwhile.
        """
        for _ in range(MERGE_TRIES):
            current = await self.holder.get(held.key)
            if current is None:
                log.warning(
                    "held session %s was closed meanwhile; a call's record is lost", held.key
                )
                return None
            session = dataclasses.replace(
                current.session,
                state=state if moves else current.session.state,
                calls=current.session.calls + tuple(made),
                transitions=current.session.transitions + tuple(moves),
            )
            kept = Held(held.key, session, self.clock(), current.version + 1)
            if await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
                return kept
        log.warning(
            "held session %s is moved by too many requests at once; a call's record is lost",
            held.key,
        )
        return None

    async def touch(self, held: Held) -> Held:
        """Mark ``held`` as used now (a client listening for changes is not idle)."""
        kept = Held(held.key, held.session, self.clock(), held.version + 1)
        if await self.holder.swap(kept, ttl=self.settings.session_idle_timeout):
            return kept
        return held

    async def release(self, user: str, kind: str, key: str) -> AuditRecord | None:
        """Stop holding a session and write its audit record; ``None`` if none was held."""
        held = await self.holder.delete(HeldKey(user, kind, key))
        self._live.pop(HeldKey(user, kind, key), None)
        if held is None:
            return None
        return await self.door.closed(held.session)

    async def expire(self) -> list[Held]:
        """Close the held sessions whose idle time ran out, writing their audit records."""
        expired = await self.holder.expired()
        for held in expired:
            self._live.pop(held.key, None)
            log.info("closing %s: idle for %.0f s", held.key, self.settings.session_idle_timeout)
            await self.door.closed(held.session)
        return expired

    async def owned(self, user: str, kind: str) -> list[Held]:
        return await self.holder.owned(user, kind)
