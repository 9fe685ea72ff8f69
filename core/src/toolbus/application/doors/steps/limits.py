"""Rate limits and quotas (``[[limits]]``), as a door's step: :class:`LimitStep`.

Each call is counted in every limit that counts it (its tool, user and groups
match; ``per`` says which counter), in the door's state store
(:class:`~toolbus.application.doors.counters.Counters`), so that every replica
counts against one limit. A call any limit has no room for is refused, with
the limit's name and the seconds until it would pass (``retry_after``: a door
answers ``429`` with ``Retry-After``); the calls the other limits granted it
are given back. A limit counts a call once the call policy before it allowed
it; a call refused after it (no approval) stays counted. A call that waited for
a person and goes on later (its agent run suspended, its task taken by another
replica) is made again, and finds its approval: it was counted when it came.
So is a call whose tool asked its caller for input, made again with the answers
and the state the tool sealed (an MCP client's next ``tools/call``): when a call
ends asking, the step notes its state in the store (:data:`ASKED_NAMESPACE`), and
the one call that brings that state back takes the note instead of a count. The
same state brought again finds no note, and is counted as the new call it is.

When the store cannot be reached, calls a limit counts are refused: a limit an
outage would lift is no limit.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Literal

from toolbus.application.agent.observations import limited, limits_unavailable
from toolbus.application.agent.steps import (
    PERMITTED,
    CallEnded,
    CallPermitted,
    CallStep,
    CallStopped,
    CheckedCall,
)
from toolbus.application.calls.relaying import continued_state, current_relay
from toolbus.application.doors.counters import Counters
from toolbus.application.doors.steps.approvals import ApprovalStep
from toolbus.domain.config.durations import duration_text
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import StateStoreError
from toolbus.domain.limits.settings import Limit

log = logging.getLogger("toolbus.doors")

#: Seconds a caller is asked to wait when the limits cannot be counted.
UNAVAILABLE_RETRY = 5.0
#: Callers (user, groups, tool) whose counters a step remembers, rather than work out
#: on every call.
REMEMBERED = 4096

#: Where the states of calls that ended asking their caller are noted, until the call
#: made again with the answers brings one back.
ASKED_NAMESPACE = "call-limits-asked"
#: Seconds a note is kept: as long as a tool's state opens by default.
ASKED_TTL = 3600.0

#: The counters of one caller's calls of one tool: (the counter's key, its limit).
_Counted = tuple[tuple[str, Limit], ...]


class LimitStep(CallStep):
    """The ``[[limits]]`` of a door, counted in ``counters``; see the module docs.

    ``approvals``: the door's approvals step, which tells a call going on after it
    waited for a person (counted then) from a new one.
    """

    name: Literal["limit"] = "limit"

    def __init__(
        self, limits: Sequence[Limit], counters: Counters, approvals: ApprovalStep | None = None
    ) -> None:
        self.limits = tuple(limits)
        self.counters = counters
        self.approvals = approvals
        self._counted: dict[tuple[str, tuple[str, ...], str], _Counted] = {}

    def applies(self, registry: Registry) -> bool:
        return bool(self.limits)

    def counted(self, user: str, groups: tuple[str, ...], tool: str) -> _Counted:
        """The counters a call of ``tool`` by ``user`` with ``groups`` is counted in."""
        caller = (user, groups, tool)
        found = self._counted.get(caller)
        if found is None:
            if len(self._counted) >= REMEMBERED:
                self._counted.clear()
            found = self._counted[caller] = tuple(
                (f"{limit.name}/{counter}", limit)
                for limit in self.limits
                for counter in limit.counters(user, groups, tool)
            )
        return found

    async def check(self, call: CheckedCall) -> CallPermitted | CallStopped:
        counted = self.counted(call.user, call.groups, call.tool.name)
        approvals = self.approvals
        if (
            counted
            and approvals is not None
            and approvals.demands(call)
            and await approvals.asked_before(call)
        ):
            return PERMITTED  # counted when it first came, before it waited
        if not counted:
            return PERMITTED
        state = continued_state()
        if state is not None and await self._continues(call, state):
            return self._noting(call)  # counted when it first came, before it asked
        verdict = await self._count(call, counted)
        if verdict is PERMITTED and (state is not None or current_relay() is not None):
            return self._noting(call)  # it may end asking, to be made again
        return verdict

    async def _count(self, call: CheckedCall, counted: _Counted) -> CallPermitted | CallStopped:
        counters = self.counters
        if len(counted) == 1 and counters.leased(counted[0][0]):
            return PERMITTED  # what most calls of a large limit find: a lease to spend
        taken: list[str] = []
        for key, limit in counted:
            if not counters.leased(key):
                try:
                    result = await counters.take(key, limit.rate)
                except StateStoreError as exc:
                    log.warning("limit %r cannot be counted: %s", limit.name, exc)
                    self._untake(taken)
                    return CallStopped(
                        self.name,
                        limits_unavailable(
                            f"the call of {call.tool.llm_name!r}",
                            "its limits cannot be counted now (their store is away)",
                        ),
                        retry_after=UNAVAILABLE_RETRY,
                        limit=limit.name,
                    )
                if not result.granted:
                    self._untake(taken)
                    return CallStopped(
                        self.name,
                        limited(call.tool, limit.name, allowed(limit), result.retry_after),
                        retry_after=result.retry_after,
                        limit=limit.name,
                    )
            taken.append(key)
        return PERMITTED

    async def _continues(self, call: CheckedCall, state: str) -> bool:
        """Whether the call brings back the state of a call that ended asking here, which
        was counted: the note is taken (once, whichever replica takes it)."""
        store = self.counters.store
        key = _asked_key(call, state)
        try:
            noted = await store.get(ASKED_NAMESPACE, key)
            return noted is not None and await store.delete(
                ASKED_NAMESPACE, key, version=noted.version
            )
        except StateStoreError as exc:
            log.warning("a continued call's note cannot be read; it is counted: %s", exc)
            return False

    def _noting(self, call: CheckedCall) -> CallPermitted:
        """Permitted, noting the state the call ends asking with, if it does."""
        store = self.counters.store

        async def note(ended: CallEnded) -> None:
            if ended.asked is not None:
                key = _asked_key(call, ended.asked)
                await store.put(ASKED_NAMESPACE, key, b"1", ttl=ASKED_TTL)

        return CallPermitted(after=(note,))

    def _untake(self, keys: list[str]) -> None:
        for key in keys:
            self.counters.untake(key)


def _asked_key(call: CheckedCall, state: str) -> str:
    """The note of ``state`` for calls of ``call``'s tool by its user: a digest (a state
    is long, and no secret of it need sit in the store)."""
    text = f"{call.user}\n{call.tool.name}\n{state}"
    return hashlib.sha256(text.encode()).hexdigest()


def allowed(limit: Limit) -> str:
    """What a limit allows, as its refusal says it: ``60 calls every 1m``."""
    calls = "1 call" if limit.calls == 1 else f"{limit.calls} calls"
    return f"{calls} every {duration_text(limit.every)}"
