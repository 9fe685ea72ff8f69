"""Rate limits counted where replicas meet: :class:`Counters`, in the door's state store.

Every counter (one per limit and caller: ``search-per-user/user=alice``) is a
small JSON state under its key in the namespace :data:`NAMESPACE`, changed by
compare-and-set (:mod:`toolbus.domain.limits.rates` says how), so that every
replica of every door that shares the store counts the same calls. The store
of a door is sealed: a counter cannot be set to a value of someone's choosing
by whoever can write the store (a deletion, or an older value put back, can
only reset it).

**Leases.** Asking the store for every call would cost a round trip per call.
Where a limit is large enough, a replica takes a share of it at once (a
*lease*: several calls taken in one write) and spends it without asking again;
the share doubles while the calls keep coming and the lease is used up, up to
a sixteenth of the limit (:data:`SHARE`) and :data:`MAX_LEASE` calls. A lease
lasts :data:`LEASE_SECONDS` at most (and never past the window it was taken
in); what is left of it then is given back in the next write. So the store
never lets more calls through than the limit allows, across every replica;
what a lease costs is that calls may be counted up to :data:`LEASE_SECONDS`
before they are made, and that a replica may hold a share another replica's
caller could have used (at most a sixteenth of the limit each). Limits under
``2 * SHARE`` calls are never leased: each call is counted in the store.

A refusal is remembered for up to :data:`LEASE_SECONDS` too (with the time the
store said to wait), so that a flood of refused calls does not ask the store
once each; calls another replica gave back meanwhile are seen after it.

Writers that lose a compare-and-set to one another wait a random moment before
trying again (:func:`~toolbus._internal.stored_json.lost_race`), and give up
with :class:`~toolbus.domain.errors.StateStoreError` after :data:`TRIES`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from toolbus._internal.stored_json import lost_race
from toolbus.domain.errors import StateStoreError
from toolbus.domain.limits.rates import Rate, State, Taken, give_back, take
from toolbus.ports import StateStore

#: The state store namespace rate-limit counters are kept in.
NAMESPACE = "call-limits"
#: At most this part of a limit is leased to one replica at a time (1/SHARE).
SHARE = 16
#: The most calls one lease takes.
MAX_LEASE = 1024
#: Seconds a lease lasts at most.
LEASE_SECONDS = 1.0
#: Tries of a write that other writers keep overtaking.
TRIES = 64
#: Counters this process remembers a lease of before it forgets those with none left.
KEPT = 4096


@dataclass(slots=True)
class _Lease:
    """Calls taken from one counter in the store and not spent yet, in this process."""

    credit: int = 0
    #: How many calls the next lease asks for.
    size: int = 1
    taken_at: float = 0.0
    expires: float = 0.0
    #: Until when this process refuses from what the store last said (at most a lease's
    #: time: calls given back meanwhile are seen after it), so that refused calls do not
    #: each ask the store again; and when the store said a call could go.
    refused_until: float = 0.0
    retry_at: float = 0.0
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class Counters:
    """The rate-limit counters of a door, in ``store``; see the module docs.

    ``clock``: Unix seconds (every replica's clock should agree within a second:
    the windows are the wall clock's). ``leases``: take shares of large limits
    (on by default).
    """

    def __init__(
        self,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.time,
        leases: bool = True,
    ) -> None:
        self.store = store
        self.clock = clock
        self.leases = leases
        self._held: dict[str, _Lease] = {}

    def leased(self, key: str) -> bool:
        """Take one call from this process's lease of ``key``, if it holds one that lasts:
        no store, no wait (the path most calls of a large limit take)."""
        lease = self._held.get(key)
        if lease is not None and lease.credit > 0 and self.clock() < lease.expires:
            lease.credit -= 1
            return True
        return False

    async def take(self, key: str, rate: Rate) -> Taken:
        """One call from the counter ``key`` of a limit of ``rate``: granted (``granted``
        1), or refused with the seconds until one could go.

        Raises :class:`~toolbus.domain.errors.StateStoreError` (or its ``Unavailable``)
        when the store cannot be reached or keeps being overtaken.
        """
        now = self.clock()
        lease = self._held.get(key)
        if lease is not None:
            if lease.credit > 0 and now < lease.expires:
                lease.credit -= 1
                return _GRANTED
            if now < lease.refused_until:
                return Taken(0, None, max(0.0, lease.retry_at - now))
        else:
            if len(self._held) >= KEPT:
                self._forget(now)
            lease = self._held[key] = _Lease()
        async with lease.lock:
            now = self.clock()
            if lease.credit > 0 and now < lease.expires:  # another task took a lease meanwhile
                lease.credit -= 1
                return _GRANTED
            return await self._lease(key, rate, lease, now)

    def _forget(self, now: float) -> None:
        """Forget the counters this process holds nothing of (the callers that went quiet)."""
        for key, lease in list(self._held.items()):
            idle = lease.credit == 0 or now >= lease.expires
            if idle and now >= lease.refused_until and not lease.lock.locked():
                del self._held[key]

    def untake(self, key: str) -> None:
        """Give back one call :meth:`take` granted and that is not made after all (another
        limit refused it), when it came from a lease that still lasts."""
        lease = self._held.get(key)
        if lease is not None and self.clock() < lease.expires:
            lease.credit += 1

    async def _lease(self, key: str, rate: Rate, lease: _Lease, now: float) -> Taken:
        """Ask the store for a lease (giving back what is left of the last one)."""
        largest = min(MAX_LEASE, rate.calls // SHARE) if self.leases else 1
        if largest <= 1 or now - lease.taken_at >= 2 * LEASE_SECONDS:
            size = 1  # a small limit, or calls that went quiet: one at a time
        elif lease.credit == 0:
            size = min(largest, lease.size * 2)  # used up while calls keep coming
        else:
            size = max(1, min(largest, lease.size - lease.credit))  # what was used
        unspent, taken_at = lease.credit, lease.taken_at
        lease.credit = 0
        taken = await self._change(key, rate, size, unspent, taken_at)
        now = self.clock()
        if taken.granted == 0:
            lease.refused_until = now + min(taken.retry_after, LEASE_SECONDS)
            lease.retry_at = now + taken.retry_after
            lease.size = 1
            return taken
        lease.size = size
        lease.taken_at = now
        lease.expires = min(now + LEASE_SECONDS, _window_end(rate, now))
        lease.credit = taken.granted - 1
        lease.refused_until = 0.0
        return _GRANTED

    async def _change(
        self, key: str, rate: Rate, want: int, unspent: int, taken_at: float
    ) -> Taken:
        """Take ``want`` calls from the stored counter, giving back ``unspent`` taken at
        ``taken_at``, by compare-and-set."""
        store = self.store
        for tries in range(TRIES):
            if tries:
                await lost_race(tries)
            now = self.clock()
            entry = await store.get(NAMESPACE, key)
            state = _read(entry.value) if entry is not None else None
            returned = give_back(rate, state, now, unspent, taken_at) if unspent else None
            if returned is not None:
                state = returned
            taken = take(rate, state, now, want)
            written_state = taken.state if taken.state is not None else returned
            if written_state is None:
                return taken  # refused, and nothing to give back: nothing to write
            value = json.dumps(written_state, separators=(",", ":")).encode()
            if entry is None:
                written = await store.create(NAMESPACE, key, value, ttl=rate.keep_for)
            else:
                written = await store.update(
                    NAMESPACE, key, value, version=entry.version, ttl=rate.keep_for
                )
            if written is not None:
                return taken
        raise StateStoreError(
            f"the limit counter {key!r} kept changing under other writers; try again"
        )


_GRANTED = Taken(1, None)


def _read(value: bytes) -> State | None:
    """A stored counter's state; ``None`` (nothing counted) when it is not one."""
    try:
        state = json.loads(value)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


def _window_end(rate: Rate, now: float) -> float:
    """When the window ``now`` falls in ends: a lease of a sliding window ends with it."""
    if rate.algorithm != "sliding-window":
        return math.inf
    return (math.floor(now / rate.every) + 1) * rate.every
