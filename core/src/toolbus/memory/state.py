"""The in-memory state store: one process's state, held to the same rules as the networked ones.

Every connection to ``memory://name`` on one event loop shares one store, as
connections to ``memory://name`` share one in-memory broker; ``memory://`` is
``memory://default``. Nothing outlives the process, so it is for tests and for
a single process; replicas need NATS or Redis.

Time comes from a :class:`~toolbus.ports.Clock` (``time.monotonic`` unless one
is handed to :func:`connect`), so tests move TTLs on without sleeping. An
expired value is dropped when it is next looked at, and the expiries are kept
in a heap so that values nobody looks at again do not pile up.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
import weakref
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pydantic

from toolbus._internal.broker_options import BrokerOptions, parse_broker_options
from toolbus._internal.state_keys import check_namespace, check_ttl, check_value, key_bytes
from toolbus._internal.state_watch import LatestState, Watches
from toolbus._internal.urls import redact_url
from toolbus.domain.errors import BrokerOptionError, StateStoreError
from toolbus.ports import Clock, StateEntry

DEFAULT_MAX_VALUE = 64 * 1024 * 1024

_Key = tuple[str, str]


@dataclass(slots=True)
class _Item:
    entry: StateEntry
    expires_at: float | None


class MemoryStateHolder:
    """The state behind every :class:`MemoryStateStore` of one name on one event loop."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.items: dict[_Key, _Item] = {}
        self.versions = itertools.count(1)
        self.watchers: dict[_Key, set[LatestState]] = {}
        # (expiry, version, key): the version tells a live expiry from a stale one.
        self._expiries: list[tuple[float, int, _Key]] = []

    def current(self, key: _Key) -> _Item | None:
        self._expire()
        return self.items.get(key)

    def write(self, key: _Key, value: bytes, ttl: float | None) -> int:
        version = next(self.versions)
        expires_at = None if ttl is None else self.clock() + ttl
        entry = StateEntry(bytes(value), version)
        self.items[key] = _Item(entry, expires_at)
        if expires_at is not None:
            heapq.heappush(self._expiries, (expires_at, version, key))
        self._tell(key, entry)
        return version

    def remove(self, key: _Key) -> None:
        if self.items.pop(key, None) is not None:
            self._tell(key, None)

    def _tell(self, key: _Key, state: StateEntry | None) -> None:
        for watcher in self.watchers.get(key, ()):
            watcher.tell(state)

    def _expire(self) -> None:
        """Drop every value whose time is up (silently: expiry is not reported to watches)."""
        now = self.clock()
        expiries = self._expiries
        while expiries and expiries[0][0] <= now:
            _, version, key = heapq.heappop(expiries)
            item = self.items.get(key)
            if item is not None and item.entry.version == version:
                del self.items[key]


_HOLDERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, MemoryStateHolder]] = (
    weakref.WeakKeyDictionary()
)


def holder_for(name: str, clock: Clock | None = None) -> MemoryStateHolder:
    """The store called ``name`` on the running loop, made on first use (with ``clock``)."""
    holders = _HOLDERS.setdefault(asyncio.get_running_loop(), {})
    holder = holders.get(name)
    if holder is None:
        holder = holders[name] = MemoryStateHolder(clock or time.monotonic)
    elif clock is not None and holder.clock is not clock:
        raise StateStoreError(
            f"the in-memory state store {name!r} already runs on another clock; "
            "give each clock a store of its own name"
        )
    return holder


class MemoryStateStore:
    """A connection to an in-memory store. Make one with :func:`connect`."""

    def __init__(self, holder: MemoryStateHolder, max_value_size: int = DEFAULT_MAX_VALUE) -> None:
        self.holder = holder
        self._max_value_size = max_value_size
        self._closed = False
        self._watches = Watches()

    @property
    def max_value_size(self) -> int | None:
        return self._max_value_size

    def _key(self, namespace: str, key: str) -> _Key:
        if self._closed:
            raise StateStoreError("the in-memory state store connection is closed")
        check_namespace(namespace)
        key_bytes(key)
        return (namespace, key)

    def _check(self, value: bytes, ttl: float | None) -> float | None:
        check_value(
            value,
            self._max_value_size,
            "raise it with memory://?max_value_size=BYTES, or store less",
        )
        return check_ttl(ttl)

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        item = self.holder.current(self._key(namespace, key))
        return None if item is None else item.entry

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        where = self._key(namespace, key)
        return self.holder.write(where, value, self._check(value, ttl))

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        where = self._key(namespace, key)
        seconds = self._check(value, ttl)
        if self.holder.current(where) is not None:
            return None
        return self.holder.write(where, value, seconds)

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        where = self._key(namespace, key)
        seconds = self._check(value, ttl)
        item = self.holder.current(where)
        if item is None or item.entry.version != version:
            return None
        return self.holder.write(where, value, seconds)

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        where = self._key(namespace, key)
        if version is not None:
            item = self.holder.current(where)
            if item is None or item.entry.version != version:
                return False
        self.holder.remove(where)
        return True

    @asynccontextmanager
    async def watch(
        self, namespace: str, key: str
    ) -> AsyncIterator[AsyncIterator[StateEntry | None]]:
        where = self._key(namespace, key)
        item = self.holder.current(where)
        watch = LatestState()
        watch.tell(None if item is None else item.entry)
        watchers = self.holder.watchers.setdefault(where, set())
        watchers.add(watch)
        try:
            async with self._watches.opened(watch) as states:
                yield states
        finally:
            watchers.discard(watch)
            if not watchers:
                self.holder.watchers.pop(where, None)

    async def close(self) -> None:
        self._closed = True
        self._watches.end_all()


class MemoryStateOptions(BrokerOptions):
    """The in-memory state store's options, as URL query parameters or ``options``."""

    #: The largest value accepted, in bytes.
    max_value_size: int = pydantic.Field(DEFAULT_MAX_VALUE, ge=1)


async def connect(
    url: str = "memory://", options: Mapping[str, Any] | None = None, *, clock: Clock | None = None
) -> MemoryStateStore:
    """Connect to the in-memory store named by ``url`` (``memory://`` or ``memory://name``).

    ``clock`` (a :class:`~toolbus.ports.Clock`) is the time TTLs are counted in;
    the first connection to a name sets it.
    """
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise BrokerOptionError(
            f"a {parts.scheme}:// URL is not an in-memory state store URL; "
            "use 'memory://' or 'memory://name'"
        )
    settings = parse_broker_options(
        MemoryStateOptions,
        parts.query,
        options,
        where=f"in-memory state store URL {redact_url(url)!r}",
    )
    name = (parts.netloc + parts.path).strip("/") or "default"
    return MemoryStateStore(holder_for(name, clock), settings.max_value_size)
