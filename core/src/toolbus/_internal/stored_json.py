"""A JSON value in a state store, changed by compare-and-set: :func:`change_json`.

Indexes that several replicas write at once (the pending approvals, the tasks
of an owner) are one JSON value under one key, read, changed and written back
only if nobody wrote it meanwhile; a lost race reads again and retries.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any, TypeVar

import anyio

from toolbus.domain.errors import StateStoreError
from toolbus.ports import StateStore

T = TypeVar("T")

#: Tries before a value other writers keep changing is given up on.
TRIES = 64
#: Seconds the first wait after a lost race may take at most (then doubling), and the most.
FIRST_WAIT, MAX_WAIT = 0.001, 0.05


async def lost_race(tries: int) -> None:
    """Wait a random while (up to doubling bounds) after ``tries`` lost compare-and-sets, so
    that writers racing for one key spread out instead of colliding again at once."""
    await anyio.sleep(random.uniform(0, min(MAX_WAIT, FIRST_WAIT * 2**tries)))


async def read_json(store: StateStore, namespace: str, key: str, default: T) -> T:
    """The JSON value under ``key``; ``default`` when there is none, or it is not JSON."""
    entry = await store.get(namespace, key)
    if entry is None:
        return default
    try:
        value: T = json.loads(entry.value)
    except ValueError:
        return default
    return value


async def change_json(
    store: StateStore,
    namespace: str,
    key: str,
    change: Callable[[Any], Any | None],
    *,
    default: Any,
    ttl: float | None = None,
    tries: int = TRIES,
) -> bool:
    """Apply ``change`` to the JSON value under ``key`` (``default`` when absent) and write
    the result back if nobody wrote the key meanwhile; retried on a lost race.

    ``change`` returns the new value, or ``None`` to leave it be (then ``False``).
    Raises :class:`~toolbus.domain.errors.StateStoreError` when other writers win
    ``tries`` times in a row.
    """
    for _ in range(tries):
        entry = await store.get(namespace, key)
        current = default
        if entry is not None:
            try:
                current = json.loads(entry.value)
            except ValueError:
                current = default
        updated = change(current)
        if updated is None:
            return False
        value = json.dumps(updated, separators=(",", ":")).encode()
        if entry is None:
            written = await store.create(namespace, key, value, ttl=ttl)
        else:
            written = await store.update(namespace, key, value, version=entry.version, ttl=ttl)
        if written is not None:
            return True
    raise StateStoreError(f"{namespace} {key!r} kept changing under other writers; try again")
