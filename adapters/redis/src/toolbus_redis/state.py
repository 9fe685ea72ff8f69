"""The Redis :class:`~toolbus.ports.StateStore`, through redis-py's asyncio client.

A namespace and key are the Redis key ``<prefix>:<namespace>:<key>`` (the key's
UTF-8 as it is: Redis keys are binary-safe, and a namespace holds no ``:``, so
the mapping is one-to-one). Each key is a hash of two fields, ``v`` the value
and ``n`` its version, and expires with Redis's own ``PEXPIRE`` (milliseconds).

Every write is one Lua script, so checking the version, writing and announcing
the change happen as one step on the server: that is what makes ``create``,
``update`` and a conditional ``delete`` atomic across every client. A version
is the server's clock in microseconds when the key was written (or one more
than the key's last version, should the clock stand still or step back), so a
key deleted and written again never repeats a version a stale writer could
still hold.

Watches: each write publishes on a channel named like its key, and a watch
subscribes to it (a connection of its own) and reads the key again on every
message. Redis tells only subscribers that are connected: after a reconnect the
watch reads the key again, so it reports the state the key has then. Expiry is
not announced (that would need the server's keyspace notifications, which
managed services often switch off).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio
import redis.exceptions
from redis.asyncio.client import PubSub
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from toolbus._internal.state_keys import check_namespace, check_ttl, check_value, key_bytes
from toolbus._internal.state_watch import LatestState, Watches
from toolbus.domain.errors import StateStoreError, StateStoreUnavailable
from toolbus.ports import StateEntry
from toolbus_redis.state_options import RedisOptions, parse_options

log = logging.getLogger("toolbus.redis")

#: Retries of a command whose connection failed, a few milliseconds apart at first:
#: enough to ride out a dropped connection, few enough that a server that is gone
#: is reported within about a second.
RETRIES = 3
#: Seconds between attempts to subscribe again while the server is away.
RESUBSCRIBE_WAIT = 0.25

# KEYS[1]: the key. ARGV: "put", "create" or "update"; the value; the TTL in
# milliseconds ("" for none); the version an update expects.
_WRITE = """
local current = redis.call('HGET', KEYS[1], 'n')
if ARGV[1] == 'create' then
  if current then return false end
elseif ARGV[1] == 'update' then
  if current ~= ARGV[4] then return false end
end
local now = redis.call('TIME')
local version = tonumber(now[1]) * 1000000 + tonumber(now[2])
if current and tonumber(current) >= version then version = tonumber(current) + 1 end
local written = string.format('%.0f', version)
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'n', written)
if ARGV[3] == '' then
  redis.call('PERSIST', KEYS[1])
else
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
redis.call('PUBLISH', KEYS[1], written)
return written
"""

# KEYS[1]: the key. ARGV[1]: the version it must hold ("" for any).
_DELETE = """
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'n') ~= ARGV[1] then return 0 end
if redis.call('DEL', KEYS[1]) == 1 then redis.call('PUBLISH', KEYS[1], '') end
return 1
"""


def _milliseconds(ttl: float | None) -> str:
    checked = check_ttl(ttl)
    return "" if checked is None else str(max(1, math.ceil(checked * 1000)))


class RedisStateStore:
    """A Redis (or Valkey) server as a state store. Make one with :func:`connect`."""

    def __init__(self, client: redis.asyncio.Redis, options: RedisOptions) -> None:
        self.client = client
        self.options = options
        self._prefix = options.prefix.encode("utf-8") + b":"
        self._write = client.register_script(_WRITE)
        self._delete = client.register_script(_DELETE)
        self._where = f"Redis at {options.server}"
        self._watches = Watches()
        self._closed = False

    @property
    def max_value_size(self) -> int | None:
        return self.options.max_value_size

    def _key(self, namespace: str, key: str) -> bytes:
        if self._closed:
            raise StateStoreError(f"the state store connection to {self._where} is closed")
        return self._prefix + check_namespace(namespace).encode("ascii") + b":" + key_bytes(key)

    def _check(self, value: bytes) -> None:
        check_value(
            value,
            self.options.max_value_size,
            "raise the 'max_value_size' option (and the server's proto-max-bulk-len), "
            "or store less",
        )

    def _failure(self, exc: Exception, doing: str) -> Exception:
        """The toolbus error for a redis-py failure while ``doing`` something."""
        if isinstance(exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError):
            return StateStoreUnavailable(
                f"cannot {doing}: the {self._where} did not answer within "
                f"{self.options.timeout:g} s ({exc}); a write may or may not have been kept; "
                "the store connects again by itself, so try again later"
            )
        if isinstance(exc, redis.exceptions.ResponseError) and "WRONGTYPE" in str(exc):
            return StateStoreError(
                f"cannot {doing}: the key holds something toolbus did not write; give the "
                "store a 'prefix' nothing else uses"
            )
        if isinstance(exc, redis.exceptions.RedisError):
            return StateStoreError(f"cannot {doing}: the {self._where} said: {exc}")
        return exc

    async def _read(self, name: bytes) -> StateEntry | None:
        value, version = await self.client.hmget(name, [b"v", b"n"])
        if version is None:
            return None
        assert isinstance(value, bytes | None)  # the client is made without decoding
        return StateEntry(value or b"", int(version))

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        name = self._key(namespace, key)
        try:
            return await self._read(name)
        except Exception as exc:
            raise self._failure(exc, f"read {namespace}/…") from exc

    async def _run_write(
        self, mode: str, name: bytes, value: bytes, ttl: float | None, expected: str, doing: str
    ) -> int | None:
        self._check(value)
        milliseconds = _milliseconds(ttl)
        try:
            written = await self._write(keys=[name], args=[mode, value, milliseconds, expected])
        except Exception as exc:
            raise self._failure(exc, doing) from exc
        return None if written is None else int(written)

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        name = self._key(namespace, key)
        version = await self._run_write("put", name, value, ttl, "", f"write {namespace}/…")
        assert version is not None
        return version

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        name = self._key(namespace, key)
        return await self._run_write("create", name, value, ttl, "", f"add {namespace}/…")

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        name = self._key(namespace, key)
        return await self._run_write(
            "update", name, value, ttl, str(version), f"update {namespace}/…"
        )

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        name = self._key(namespace, key)
        expected = "" if version is None else str(version)
        try:
            return bool(await self._delete(keys=[name], args=[expected]))
        except Exception as exc:
            raise self._failure(exc, f"delete {namespace}/…") from exc

    # -- watching ------------------------------------------------------------------------

    @asynccontextmanager
    async def watch(
        self, namespace: str, key: str
    ) -> AsyncIterator[AsyncIterator[StateEntry | None]]:
        name = self._key(namespace, key)
        pubsub = self.client.pubsub()
        latest = LatestState()
        try:
            await pubsub.subscribe(name)
            # Live once the server confirms: only then is the key read, so that a
            # write in between is either in what is read or announced after it.
            await self._confirmed(pubsub)
            latest.tell(await self._read(name))
        except Exception as exc:
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            raise self._failure(exc, f"watch {namespace}/…") from exc
        try:
            async with self._watches.opened(latest, self._follow(pubsub, name, latest)) as states:
                yield states
        finally:
            await pubsub.aclose()  # type: ignore[no-untyped-call]

    async def _confirmed(self, pubsub: PubSub) -> None:
        while True:
            message = await pubsub.get_message(timeout=self.options.timeout)
            if message is None:
                raise redis.exceptions.TimeoutError("the subscription was not confirmed")
            if message["type"] == "subscribe":
                return

    async def _follow(self, pubsub: PubSub, name: bytes, latest: LatestState) -> None:
        """Read the key again on each announcement, and on each subscription made anew."""
        task = asyncio.current_task()
        assert task is not None
        while True:
            try:
                message = await pubsub.get_message(timeout=None)
                if message is not None and message["type"] in ("message", "subscribe"):
                    latest.tell(await self._read(name))
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                if not task.cancelling():
                    # get_message connects (and subscribes) again on the next turn.
                    await asyncio.sleep(RESUBSCRIBE_WAIT)
            # redis-py lets a command it has sent run to its answer, and the
            # cancellation that came meanwhile can be lost on the way: honour it here.
            if task.cancelling():
                raise asyncio.CancelledError

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watches.end_all()
        await self.client.aclose()


async def connect(url: str, options: Mapping[str, Any] | None = None) -> RedisStateStore:
    """Connect to the Redis or Valkey server at ``url`` (see :mod:`toolbus_redis.state_options`).

    Fails with :class:`~toolbus.domain.errors.StateStoreUnavailable` naming the
    server when it does not answer within ``timeout``, and with
    :class:`~toolbus.domain.errors.StateStoreError` when it refuses the credentials.
    """
    settings = parse_options(url, options)
    client = redis.asyncio.Redis(
        **settings.client_kwargs(),
        retry=Retry(ExponentialWithJitterBackoff(base=0.01, cap=0.25), RETRIES),
    )
    try:
        await client.ping()
    except redis.exceptions.AuthenticationError as exc:
        await client.aclose()
        raise StateStoreError(
            f"Redis at {settings.server} refused the credentials ({exc}); check the "
            "'username' and 'password' options"
        ) from None
    except (redis.exceptions.RedisError, OSError) as exc:
        await client.aclose()
        raise StateStoreUnavailable(
            f"cannot connect to Redis at {settings.server}: {exc}; check that redis-server "
            "(or valkey-server) runs there and that the URL, credentials and TLS options "
            "are right"
        ) from None
    return RedisStateStore(client, settings)
