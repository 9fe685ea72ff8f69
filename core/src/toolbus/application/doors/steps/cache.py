"""Cached answers of read-only tools, as a door's step: :class:`CacheStep`.

A tool whose descriptor says ``"cache": "5m"`` (and which is declared
read-only, ``annotations.readOnlyHint``) has each successful answer kept in the
door's state store for that long, under a key made of

* the tool's name and its configuration (the config values it is called with),
* the arguments of the call, as the tool is sent them (argument options applied),
* and whose calls it answers: the caller's user (``"scope": "user"``, the
  default), or the groups the caller's session was granted (``"scope": "group"``);

and a later call with the same key is answered with it, without calling the tool.

The cache is the *last* step: a call reaches it only once every other step let
it through (the session offered the tool to the caller's groups and state, the
call policy allowed its arguments, a limit had room, a budget was not spent, a
person approved it), so a cached answer is never given to a caller who could
not have made the call; and one user's answer is never another's, since the
user is in the key (or, with ``group``, the very groups that were granted).

The door's store is sealed: a kept answer cannot be forged or moved to another
key by whoever can write the store, and it holds its own expiry, so an old one
put back is not used after its time.

Each replica also keeps the answers it kept or read lately in its own memory
(:data:`KEPT_HERE` of them, :data:`KEPT_HERE_BYTES` at most), under the same
keys and until the same expiry: a hit there costs no trip to the store. An
answer is good until it expires wherever it is read, so the two never disagree
on what is still good.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from functools import partial
from typing import Any, Literal

import orjson

from toolbus.application.agent.steps import (
    PERMITTED,
    CallAnswered,
    CallEnded,
    CallPermitted,
    CallStep,
    CheckedCall,
)
from toolbus.domain.config.descriptors import CachePolicy
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import StateStoreError
from toolbus.ports import StateStore

log = logging.getLogger("toolbus.doors")

#: The state store namespace cached answers are kept in.
NAMESPACE = "tool-answers"
#: Answers a replica keeps in its own memory, at most, and their characters, at most.
KEPT_HERE = 1024
KEPT_HERE_BYTES = 8 * 1024 * 1024

#: An answer, what follows it, and the Unix time it expires at.
_Answer = tuple[str, str | None, float]


class _KeptHere:
    """The answers this replica kept or read lately, the least recently used going first."""

    def __init__(self, entries: int, size: int) -> None:
        self.entries = entries
        self.size = size
        self._answers: OrderedDict[str, _Answer] = OrderedDict()
        self._held = 0

    def get(self, key: str, now: float) -> _Answer | None:
        answer = self._answers.get(key)
        if answer is None:
            return None
        if answer[2] <= now:
            self._drop(key)
            return None
        self._answers.move_to_end(key)
        return answer

    def put(self, key: str, answer: _Answer) -> None:
        if self.entries <= 0 or len(answer[0]) > self.size:
            return
        if key in self._answers:
            self._drop(key)
        self._answers[key] = answer
        self._held += len(answer[0])
        while len(self._answers) > self.entries or self._held > self.size:
            self._drop(next(iter(self._answers)))

    def _drop(self, key: str) -> None:
        self._held -= len(self._answers.pop(key)[0])


def cache_key(call: CheckedCall, policy: CachePolicy) -> str:
    """Where the answer to ``call`` is kept: the tool's name and a digest of its name and
    configuration, the call's arguments and whose calls the answer may answer."""
    tool = call.tool
    whose = ["user", call.user] if policy.scope == "user" else ["groups", sorted(call.groups)]
    # Each part is JSON (which escapes every control character), so \0 between them
    # keeps one split of the whole from reading as another.
    digest = hashlib.sha256(_json([tool.name, dict(tool.config)]))
    digest.update(b"\0" + _json(call.arguments))
    digest.update(b"\0" + _json(whose))
    return f"{tool.name}/{digest.hexdigest()}"


def _json(value: Any) -> bytes:
    """``value`` as JSON with its keys sorted: equal values, equal bytes."""
    return orjson.dumps(value, default=str, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)


class CacheStep(CallStep):
    """Answers calls of cached tools from the door's ``store``; see the module docs.

    ``clock``: Unix seconds. ``kept_here``: answers kept in this process's memory too
    (0: every hit reads the store).
    """

    name: Literal["cache"] = "cache"

    def __init__(
        self,
        store: StateStore,
        *,
        clock: Callable[[], float] = time.time,
        kept_here: int = KEPT_HERE,
    ) -> None:
        self.store = store
        self.clock = clock
        self._here = _KeptHere(kept_here, KEPT_HERE_BYTES)

    def applies(self, registry: Registry) -> bool:
        return any(tool.cache is not None for tool in registry.tools.values())

    async def check(self, call: CheckedCall) -> CallPermitted | CallAnswered:
        policy = call.tool.cache
        if policy is None:
            return PERMITTED
        key = cache_key(call, policy)
        answer = self._here.get(key, self.clock())
        if answer is None:
            try:
                entry = await self.store.get(NAMESPACE, key)
            except StateStoreError as exc:
                log.warning(
                    "the cache of %r cannot be read, so the call is made: %s", call.tool.name, exc
                )
                return CallPermitted(cache="miss")
            if entry is not None:
                answer = _kept(entry.value, self.clock())
                if answer is not None:
                    self._here.put(key, answer)
        if answer is not None:
            return CallAnswered(self.name, answer[0], answer[1])
        return CallPermitted(cache="miss", after=(partial(self._keep, key, policy),))

    async def _keep(self, key: str, policy: CachePolicy, ended: CallEnded) -> None:
        if ended.status != "ok" or ended.cached or ended.observation is None:
            return
        answer = (ended.observation, ended.after_execution, self.clock() + policy.ttl)
        value = orjson.dumps(
            {"observation": answer[0], "after_execution": answer[1], "expires_at": answer[2]}
        )
        room = self.store.max_value_size
        if room is not None and len(value) > room:
            log.debug("an answer of %d bytes is too large to keep in the cache", len(value))
            return
        await self.store.put(NAMESPACE, key, value, ttl=policy.ttl)
        self._here.put(key, answer)


def _kept(value: bytes, now: float) -> _Answer | None:
    """The answer a kept value holds, while it is good; ``None`` otherwise."""
    try:
        kept = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(kept, dict):
        return None
    observation, after_execution = kept.get("observation"), kept.get("after_execution")
    expires_at = kept.get("expires_at")
    if not isinstance(observation, str) or not isinstance(expires_at, int | float):
        return None
    if expires_at <= now or not (after_execution is None or isinstance(after_execution, str)):
        return None
    return observation, after_execution, float(expires_at)
