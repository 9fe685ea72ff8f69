"""Whether a door's state store answers now: what ``/readyz`` says of it, and what a door
asks before it takes a call that needs it.

A door that keeps its sessions in a shared store (``state`` in ``toolbus.toml``)
cannot serve a session call while the store is away. It says so at once rather
than letting each call wait out the store's timeout: :meth:`StoreHealth.failed`
notes a failure the door met, and from then on :meth:`StoreHealth.available`
answers from one probe (a read of a key nobody writes, bounded by
:data:`PROBE_TIMEOUT`) made at most every :data:`PROBE_EVERY` seconds, until a
probe finds the store again. While the store answers, nothing is probed: the
door's own calls are the check. ``/readyz`` probes (:meth:`StoreHealth.refresh`,
at most every :data:`PROBE_EVERY` seconds however often it is asked), so that a
load balancer hears of a store that went away while the door was idle.

Callers that cannot wait are answered ``503`` with a ``Retry-After`` of
:data:`RETRY_AFTER` seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import anyio

from toolbus.domain.errors import StateStoreError
from toolbus.ports import StateStore

#: The namespace and key a probe reads (never written).
PROBE_NAMESPACE = "door-health"
PROBE_KEY = "probe"
#: Seconds a probe waits for the store.
PROBE_TIMEOUT = 1.0
#: A store found away is probed again at most this often (seconds).
PROBE_EVERY = 0.5
#: Seconds a caller is told to wait before it tries again.
RETRY_AFTER = 2


class StoreHealth:
    """What a door knows of its state store (see the module docs)."""

    def __init__(
        self,
        store: StateStore,
        *,
        probe_timeout: float = PROBE_TIMEOUT,
        probe_every: float = PROBE_EVERY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.probe_timeout = probe_timeout
        self.probe_every = probe_every
        self.clock = clock
        #: Why the store was last found away (the error's kind); None while it answers.
        self.down: str | None = None
        self._probed = -float("inf")
        self._probing = anyio.Lock()

    def failed(self, error: BaseException) -> None:
        """Note that the door found the store away (a call failed on it)."""
        if self.down is None:
            self._probed = self.clock()  # the failure was the probe
        self.down = type(error).__name__

    async def available(self) -> bool:
        """Whether the store answers: at once while it does, else from a probe."""
        if self.down is None:
            return True
        async with self._probing:
            if self.down is not None and self.clock() - self._probed >= self.probe_every:
                await self.probe()
        return self.down is None

    async def probe(self) -> bool:
        """Ask the store now (up to ``probe_timeout``); True when it answered."""
        self._probed = self.clock()
        try:
            with anyio.fail_after(self.probe_timeout):
                await self.store.get(PROBE_NAMESPACE, PROBE_KEY)
        except TimeoutError:
            self.down = "no answer"
        except StateStoreError as exc:
            self.down = type(exc).__name__
        else:
            self.down = None
        return self.down is None

    async def refresh(self) -> str:
        """Probe the store (at most every ``probe_every`` seconds), then :meth:`check`."""
        async with self._probing:
            if self.clock() - self._probed >= self.probe_every:
                await self.probe()
        return self.check()

    def check(self) -> str:
        """What ``/readyz`` says of the store: ``ok``, or why not."""
        if self.down is None:
            return "ok"
        return f"unreachable ({self.down}); the door answers 503 to calls that need it"
