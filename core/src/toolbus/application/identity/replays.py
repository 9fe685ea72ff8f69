"""Where a verifier remembers the call tokens it has taken: :class:`ReplayGuard`.

On an at-most-once queue a token seen twice is a replay (a captured signed
call published again), refused with
:class:`~toolbus.domain.errors.Unauthorized`. A use is the token's id (the
call id), its issue time and the call's ``attempt``, remembered until the
token expires.

* :class:`InProcessReplays` (the default) remembers in this process: a replay
  sent to another replica of the service, or after a restart, is not seen.
  :func:`per_replica` says so in the log and shortens the life of the tokens
  the verifier accepts, so that the window for such a replay is short.
* :class:`StoredReplays` remembers in a state store every replica shares
  (the NATS key-value bucket on the broker's own servers, or the configured
  ``state``): of any number of replicas and restarts, one takes each use; and
  each replica remembers its own uses too, so that deleting the store's
  entries does not let a replay run twice where it ran once.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Protocol

from toolbus.ports import StateStore

log = logging.getLogger("toolbus.identity")

#: Token uses remembered in one process at most (an expired token is refused anyway).
DEFAULT_REPLAY_MEMORY = 100_000
#: The state store namespace of taken token uses.
NAMESPACE = "replay-guard"
#: Seconds after it was signed that a token is accepted on an at-most-once queue
#: when replays are remembered per replica only.
PER_REPLICA_TOKEN_AGE = 30.0


class ReplayGuard(Protocol):
    """Takes each use of a token once."""

    #: Whether every replica of the service (and a restarted one) shares what is taken.
    shared: bool

    async def first_use(self, use: str, until: float, now: float) -> bool:
        """Take ``use`` (remembered until ``until``, Unix seconds); ``False`` if taken before."""
        ...


class InProcessReplays:
    """Token uses taken in this process, oldest first, forgotten as they expire."""

    shared = False

    def __init__(self, memory: int = DEFAULT_REPLAY_MEMORY) -> None:
        self.memory = memory
        self._seen: OrderedDict[str, float] = OrderedDict()
        #: When the oldest use remembered expires (kept, not read from the dict per call).
        self._oldest_until = math.inf

    def take(self, use: str, until: float, now: float) -> bool:
        """:meth:`first_use`, for callers that cannot await."""
        seen = self._seen
        if use in seen:
            return False
        if self._oldest_until < now or len(seen) >= self.memory:
            self._forget(now)
        seen[use] = until
        if len(seen) == 1:
            self._oldest_until = until
        return True

    def _forget(self, now: float) -> None:
        """Forget what has expired (expiries arrive nearly in order), and the oldest
        beyond the memory's size: an expired token is refused anyway."""
        seen = self._seen
        while seen and (next(iter(seen.values())) < now or len(seen) >= self.memory):
            seen.popitem(last=False)
        self._oldest_until = next(iter(seen.values())) if seen else math.inf

    async def first_use(self, use: str, until: float, now: float) -> bool:
        return self.take(use, until, now)


class StoredReplays:
    """Token uses taken in a state store: one replica of all, once, across restarts.

    Each replica also remembers the uses it took itself, in its memory: whoever
    can write the store can delete its entries, and a call replayed to the
    replica that ran it is refused all the same.
    """

    shared = True

    def __init__(
        self, store: StateStore, *, namespace: str = NAMESPACE, memory: int = DEFAULT_REPLAY_MEMORY
    ) -> None:
        self.store = store
        self.namespace = namespace
        self.taken_here = InProcessReplays(memory)

    async def first_use(self, use: str, until: float, now: float) -> bool:
        if not self.taken_here.take(use, until, now):
            return False
        # Kept a second beyond the token's life: a store may round a TTL up, never down.
        ttl = max(1.0, math.ceil(until - now) + 1.0)
        return await self.store.create(self.namespace, use, b"", ttl=ttl) is not None


def per_replica(service: str, broker: str) -> str:
    """The warning a service host logs when replays are remembered per replica only."""
    return (
        f"{service}: replay protection is per replica (broker {broker} has no state store "
        "of its own, and toolbus.toml names no state): a signed call replayed to another "
        f"replica, or after a restart, would run again, so tokens are accepted for "
        f"{PER_REPLICA_TOKEN_AGE:g} s after they were signed; name a state store "
        '(state = "redis://..." or "nats://...") to refuse replays everywhere'
    )
