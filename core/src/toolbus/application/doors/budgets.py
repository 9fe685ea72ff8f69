"""What callers spend, counted where replicas meet: :class:`Budgets`, in the door's state store.

Each budget (``[[budgets]]``) keeps one counter per caller it counts apart
(``per``: each user's, each group's, or everyone's), for its current period,
under ``<budget>/<who>`` in the namespace :data:`NAMESPACE`: ``{"window": N,
"spent": amount}``, changed by compare-and-set, so that every replica adds to
the same sum. A new period starts the sum again.

Before a tool call (the ``budget`` step) and before each model turn (the agent
loop asks its session), every budget counting the caller must have something
left; what the call or the turn cost is added once it is known. So a budget is
refused *after* the call that spends it: the last call may take it past its
amount, never the next one.

A replica reads a counter from the store at most once a second
(:data:`READ_SECONDS`) and counts its own charges into what it read: other
replicas' spending of the last second may reach it late.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from toolbus._internal.stored_json import lost_race
from toolbus.application.agent.observations import budget_spent, limits_unavailable
from toolbus.application.agent.steps import CallStopped
from toolbus.domain.errors import StateStoreError
from toolbus.domain.limits.settings import Budget
from toolbus.ports import StateStore

log = logging.getLogger("toolbus.doors")

#: The state store namespace budgets' counters are kept in.
NAMESPACE = "budgets"
#: Seconds a replica trusts what it read of a counter.
READ_SECONDS = 1.0
#: Seconds a counter outlives its period (so that a late reader sees it ended).
KEPT_AFTER = 3600.0
#: Tries of a write that other writers keep overtaking.
TRIES = 64
#: Seconds a caller is asked to wait when budgets cannot be counted.
UNAVAILABLE_RETRY = 5.0
#: Counters this process remembers what it read of.
KEPT = 4096


@dataclass(slots=True)
class _Read:
    window: int
    spent: float
    at: float


@dataclass(frozen=True, slots=True)
class Spent:
    """What one counter of a budget holds now: ``spent`` in the period that ends in
    ``ends_in`` seconds."""

    budget: Budget
    counter: str
    spent: float
    ends_in: float

    @property
    def left(self) -> float:
        return max(0.0, self.budget.amount - self.spent)


class Budgets:
    """The ``[[budgets]]`` of a door, counted in ``store``; see the module docs.

    ``currency`` names the amounts in refusals; ``clock`` is Unix seconds.
    """

    def __init__(
        self,
        budgets: Sequence[Budget],
        store: StateStore,
        *,
        currency: str = "USD",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.budgets = tuple(budgets)
        self.store = store
        self.currency = currency
        self.clock = clock
        self._read: dict[str, _Read] = {}

    # ------------------------------------------------------------------ Spending

    async def check(self, user: str, groups: tuple[str, ...]) -> CallStopped | None:
        """Whether ``user``'s next model turn may be taken (see :meth:`refusal`)."""
        return await self.refusal(user, groups, "the next model turn")

    async def charge(self, user: str, groups: tuple[str, ...], amount: float) -> None:
        """Add ``amount`` to every counter of every budget counting ``user`` with ``groups``."""
        if amount <= 0:
            return
        for budget in self.budgets:
            for counter in budget.counters(user, groups):
                await self._add(budget, counter, amount)

    # ------------------------------------------------------------------ reading

    async def refusal(self, user: str, groups: tuple[str, ...], what: str) -> CallStopped | None:
        """``None`` while every budget counting ``user`` has something left, else the refusal
        of ``what`` (``the call of 'search'``) naming the spent budget; also when the
        budgets cannot be read (their store is away)."""
        for budget in self.budgets:
            for counter in budget.counters(user, groups):
                try:
                    spent = await self.spent(budget, counter)
                except StateStoreError as exc:
                    log.warning("budget %r cannot be read: %s", budget.name, exc)
                    return CallStopped(
                        "budget",
                        limits_unavailable(what, "its budgets cannot be read now"),
                        retry_after=UNAVAILABLE_RETRY,
                        limit=budget.name,
                    )
                if spent.left <= 0:
                    return CallStopped(
                        "budget",
                        budget_spent(what, budget.name, self.describe(budget), spent.ends_in),
                        retry_after=spent.ends_in,
                        limit=budget.name,
                    )
        return None

    def describe(self, budget: Budget) -> str:
        """What a budget allows, as a refusal says it: ``5 USD every 1d``."""
        return f"{budget.amount:g} {self.currency} every {budget.period}"

    async def spent(self, budget: Budget, counter: str) -> Spent:
        """What ``counter`` of ``budget`` has spent in the current period."""
        now = self.clock()
        window, ends_in = budget.period.window(now)
        key = f"{budget.name}/{counter}"
        known = self._read.get(key)
        if known is None or known.window != window or now - known.at >= READ_SECONDS:
            entry = await self.store.get(NAMESPACE, key)
            spent = _spent(entry.value if entry is not None else None, window)
            known = self._remember(key, window, spent, now)
        return Spent(budget, counter, known.spent, ends_in)

    def _remember(self, key: str, window: int, spent: float, now: float) -> _Read:
        if key not in self._read and len(self._read) >= KEPT:
            self._read = {k: r for k, r in self._read.items() if now - r.at < READ_SECONDS}
        read = self._read[key] = _Read(window, spent, now)
        return read

    async def _add(self, budget: Budget, counter: str, amount: float) -> None:
        key = f"{budget.name}/{counter}"
        store = self.store
        for tries in range(TRIES):
            if tries:
                await lost_race(tries)
            now = self.clock()
            window, ends_in = budget.period.window(now)
            entry = await store.get(NAMESPACE, key)
            spent = _spent(entry.value if entry is not None else None, window) + amount
            value = json.dumps({"window": window, "spent": spent}).encode()
            ttl = ends_in + KEPT_AFTER
            if entry is None:
                written = await store.create(NAMESPACE, key, value, ttl=ttl)
            else:
                written = await store.update(NAMESPACE, key, value, version=entry.version, ttl=ttl)
            if written is not None:
                self._remember(key, window, spent, now)
                return
        raise StateStoreError(f"the budget counter {key!r} kept changing under other writers")


def _spent(value: bytes | None, window: int) -> float:
    """What a stored counter says was spent in ``window`` (0 for another period, or none)."""
    if value is None:
        return 0.0
    try:
        state = json.loads(value)
    except ValueError:
        return 0.0
    if not isinstance(state, dict) or state.get("window") != window:
        return 0.0
    spent = state.get("spent")
    if isinstance(spent, bool) or not isinstance(spent, int | float) or not spent >= 0:
        return 0.0
    return float(spent)
