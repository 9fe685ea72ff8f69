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

When the store cannot be reached, calls a limit counts are refused: a limit an
outage would lift is no limit.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Literal

from toolbus.application.agent.observations import limited, limits_unavailable
from toolbus.application.agent.steps import (
    PERMITTED,
    CallPermitted,
    CallStep,
    CallStopped,
    CheckedCall,
)
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

    def _untake(self, keys: list[str]) -> None:
        for key in keys:
            self.counters.untake(key)


def allowed(limit: Limit) -> str:
    """What a limit allows, as its refusal says it: ``60 calls every 1m``."""
    calls = "1 call" if limit.calls == 1 else f"{limit.calls} calls"
    return f"{calls} every {duration_text(limit.every)}"
