"""What the state store suite's cases share: how the suite is bound to a store
(:class:`BoundStore`), the keys and sizes it tries, and waiting on a remote store."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TypeVar

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the state store conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.ports import StateEntry, StateStore

StoreFactory = Callable[[], Awaitable[StateStore]]
T = TypeVar("T")

#: The largest value limit the suite tries to exceed (a store allowing more is
#: bound with a lower ``max_value_size`` for the test).
LIMIT_TRIED = 16 * 1024 * 1024
#: The size of the large value every store must carry, or its limit if lower.
LARGE_VALUE = 4 * 1024 * 1024
#: How often a condition on a remote store is checked while waiting for it.
POLL_INTERVAL = 0.05

#: Keys that engines treat specially, and keys that a careless escaping would merge.
AWKWARD_KEYS = (
    "plain",
    "a.b",
    "a_b",
    "a-b",
    "a=b",
    "a=2Eb",
    "a/b",
    "a:b",
    "a b",
    "*",
    ">",
    "a.*.>",
    ".leading",
    "trailing.",
    "..",
    "tab\there",
    "line\nbreak",
    "naïve ünïcødé",
    "日本語",
    "🚀",
    "\x00nul",
    "%2E",
    "k" * 1000,
    "k" * 1001,
)


@dataclass(frozen=True, slots=True)
class Outage:
    """A store on a server the suite may stop and start again (same address, same data)."""

    connect: StoreFactory
    stop: Callable[[], Awaitable[None]]
    start: Callable[[], Awaitable[None]]


def fresh_namespace() -> str:
    return f"conformance-{uuid.uuid4().hex[:12]}"


async def eventually(check: Callable[[], Awaitable[T | None]], timeout: float, what: str) -> T:
    """The first non-``None`` result of ``check``, polled until ``timeout`` seconds pass.

    A remote store announces neither expiry nor its own return; asking it is the
    only way to see either.
    """
    with anyio.move_on_after(timeout):
        while True:
            found = await check()
            if found is not None:
                return found
            await anyio.sleep(POLL_INTERVAL)
    raise AssertionError(f"{what} did not happen within {timeout} s")


async def next_state(
    changes: AsyncIterator[StateEntry | None], timeout: float
) -> StateEntry | None:
    with anyio.fail_after(timeout):
        return await anext(changes)


class BoundStore:
    """The fixtures every case uses: ``store_factory`` (the binding), ``advance_clock``,
    ``outage``, ``connect``, ``stack`` and a fresh namespace ``ns``."""

    #: Seconds any single wait may take.
    settle_timeout: float = 10.0
    #: Seconds of the TTLs the suite waits out when the clock cannot be moved.
    short_ttl: float = 1.0

    @pytest.fixture
    def store_factory(self) -> StoreFactory:
        raise NotImplementedError("bind the suite by overriding the 'store_factory' fixture")

    @pytest.fixture
    def advance_clock(self) -> Callable[[float], None] | None:
        return None

    @pytest.fixture
    def outage(self) -> Outage | None:
        return None

    @pytest.fixture
    async def stack(self) -> AsyncIterator[AsyncExitStack]:
        async with AsyncExitStack() as stack:
            yield stack

    @pytest.fixture
    def connect(self, store_factory: StoreFactory, stack: AsyncExitStack) -> StoreFactory:
        """A new connection, closed when the test ends."""

        async def open_store() -> StateStore:
            store = await store_factory()
            stack.push_async_callback(store.close)
            return store

        return open_store

    @pytest.fixture
    def ns(self) -> str:
        return fresh_namespace()

    async def _gone(
        self,
        store: StateStore,
        ns: str,
        key: str,
        advance_clock: Callable[[float], None] | None,
        ttl: float,
    ) -> None:
        """Wait until ``key``'s TTL of ``ttl`` seconds has run out, moving the clock if we may."""
        if advance_clock is not None:
            advance_clock(ttl)
            assert await store.get(ns, key) is None
            return

        async def absent() -> bool | None:
            return True if await store.get(ns, key) is None else None

        await eventually(absent, self.settle_timeout + ttl, f"expiry of {key!r}")
