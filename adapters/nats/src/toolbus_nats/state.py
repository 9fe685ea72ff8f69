"""The NATS :class:`~toolbus.ports.StateStore`: a JetStream key-value bucket.

One bucket (option ``bucket``, made on first use with ``replicas`` copies)
holds every namespace; :mod:`toolbus_nats.state_options` says how a namespace
and key become a bucket key. A version is the bucket's revision of the key
(JetStream's stream sequence), and conditional writes are JetStream's own
"expected last subject sequence" check, so they are atomic across every client
of the cluster. The bucket keeps one revision per key.

Reads, adds, plain writes and watches go through nats-py's key-value API. Its
``put`` and ``update`` take no time to live, and its ``delete`` leaves a marker
for ever (one per session or run that ever ended); so writes with a TTL and
conditional deletes publish the very message the API would, with JetStream's
per-message TTL (``Nats-TTL``, whole seconds, nats-server 2.11 and later), and
every delete is a purge whose marker expires after :data:`MARKER_TTL`.

The connection is a :class:`~toolbus_nats.bus.NatsBus`'s: it reconnects on its
own, for ever by default. While the server is away, requests end after
``timeout`` seconds with :class:`~toolbus.domain.errors.StateStoreUnavailable`;
watches start over when the connection is back and report the key's state then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qsl

import nats.errors
import nats.js.errors
from nats.js import api
from nats.js.kv import KV_DEL, KV_OP, KV_PURGE, MSG_ROLLUP_SUBJECT, KeyValue

from toolbus._internal.state_keys import check_ttl, check_value
from toolbus._internal.state_watch import LatestState, Watches
from toolbus.domain.errors import BusClosed, StateStoreError, StateStoreUnavailable
from toolbus.ports import StateEntry
from toolbus_nats.bus import NatsBus
from toolbus_nats.bus import connect as connect_bus
from toolbus_nats.state_options import (
    BROKER_ONLY,
    NatsStateOptions,
    bucket_key,
    parse_state_options,
)

log = logging.getLogger("toolbus.nats.state")

#: Seconds a delete's marker stays: long enough for a watch that is starting
#: over after a reconnect to see the deletion, short enough not to pile up.
MARKER_TTL = 15 * 60
#: Room left in the server's max payload for the headers a write carries.
HEADER_ROOM = 1024
#: JetStream's error codes for "the subject's last sequence is not the one expected".
WRONG_LAST_SEQUENCE = (10071, 10164)
#: Seconds between attempts to start a watch again while the server is coming back.
WATCH_RETRY_WAIT = 0.25


def _whole_seconds(ttl: float | None) -> int | None:
    """A TTL as JetStream takes it: whole seconds, rounded up (never shorter than asked)."""
    checked = check_ttl(ttl)
    return None if checked is None else max(1, math.ceil(checked))


class NatsStateStore:
    """A JetStream key-value bucket as a state store. Make one with :func:`connect`."""

    def __init__(self, bus: NatsBus, kv: KeyValue, options: NatsStateOptions) -> None:
        self.bus = bus
        self.kv = kv
        self.options = options
        self._js = bus.nc.jetstream(timeout=options.timeout)
        self._subject_prefix = f"$KV.{options.bucket}."
        self._where = ",".join(options.servers)
        self._watches = Watches()
        self._closed = False

    @property
    def max_value_size(self) -> int | None:
        return max(0, self.bus.nc.max_payload - HEADER_ROOM)

    def _key(self, namespace: str, key: str) -> str:
        if self._closed:
            raise StateStoreError(f"the NATS state store connection to {self._where} is closed")
        return bucket_key(namespace, key)

    def _check(self, value: bytes) -> None:
        check_value(
            value,
            self.max_value_size,
            "raise 'max_payload' in the nats-server configuration (at most 64MB), or store less",
        )

    def _unavailable(self, exc: Exception, doing: str) -> Exception:
        """The toolbus error for a nats-py failure while ``doing`` something."""
        if isinstance(exc, nats.js.errors.APIError) and exc.err_code == 10166:
            return StateStoreError(
                f"cannot {doing}: the bucket {self.options.bucket!r} does not allow per-message "
                "TTLs; it was made by something else: delete it, or name another bucket"
            )
        if isinstance(exc, nats.js.errors.APIError) and not isinstance(
            exc, nats.js.errors.ServiceUnavailableError
        ):
            return StateStoreError(f"cannot {doing}: JetStream said: {exc.description}")
        if isinstance(exc, nats.errors.Error | TimeoutError | OSError):
            return StateStoreUnavailable(
                f"cannot {doing}: the NATS state store at {self._where} did not answer within "
                f"{self.options.timeout:g} s (the server may be away or restarting, or the "
                "bucket electing a leader); a write may or may not have been kept; the "
                "connection keeps trying, so try again later"
            )
        return exc

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        name = self._key(namespace, key)
        try:
            entry = await self.kv.get(name, validate_keys=False)
        except nats.js.errors.KeyNotFoundError:
            return None
        except Exception as exc:
            raise self._unavailable(exc, f"read {namespace}/…") from exc
        assert entry.revision is not None
        return StateEntry(entry.value or b"", entry.revision)

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        name = self._key(namespace, key)
        self._check(value)
        seconds = _whole_seconds(ttl)
        try:
            if seconds is None:
                return await self.kv.put(name, bytes(value), validate_keys=False)
            return await self._publish(name, value, {}, seconds)
        except Exception as exc:
            raise self._unavailable(exc, f"write {namespace}/…") from exc

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        name = self._key(namespace, key)
        self._check(value)
        seconds = _whole_seconds(ttl)
        # A deletion's marker that expires between nats-py's two steps (write as
        # the first revision; else write over the marker) ends as not-found: again.
        for _ in range(3):
            try:
                return await self.kv.create(
                    name, bytes(value), validate_keys=False, msg_ttl=seconds
                )
            except nats.js.errors.KeyWrongLastSequenceError:
                return None
            except nats.js.errors.KeyNotFoundError:
                continue
            except Exception as exc:
                raise self._unavailable(exc, f"add {namespace}/…") from exc
        return None

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        name = self._key(namespace, key)
        self._check(value)
        seconds = _whole_seconds(ttl)
        if version < 1:
            return None  # JetStream reads an expected sequence of 0 as "absent"
        try:
            if seconds is None:
                return await self.kv.update(name, bytes(value), last=version, validate_keys=False)
            return await self._publish(
                name, value, {api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(version)}, seconds
            )
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        except Exception as exc:
            raise self._unavailable(exc, f"update {namespace}/…") from exc

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        name = self._key(namespace, key)
        try:
            if version is None:
                await self.kv.purge(name, msg_ttl=MARKER_TTL)
                return True
            if version < 1:
                return False
            headers = {
                KV_OP: KV_PURGE,
                api.Header.ROLLUP: MSG_ROLLUP_SUBJECT,
                api.Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(version),
            }
            await self._publish(name, b"", headers, MARKER_TTL)
            return True
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        except Exception as exc:
            raise self._unavailable(exc, f"delete {namespace}/…") from exc

    async def _publish(self, name: str, value: bytes, headers: dict[str, str], ttl: int) -> int:
        """Write the key-value message for ``name`` with JetStream's per-message TTL."""
        try:
            ack = await self._js.publish(
                self._subject_prefix + name, bytes(value), headers=headers or None, msg_ttl=ttl
            )
        except nats.js.errors.APIError as exc:
            if exc.err_code in WRONG_LAST_SEQUENCE:
                raise nats.js.errors.KeyWrongLastSequenceError(description=exc.description) from exc
            raise
        return ack.seq

    # -- watching ------------------------------------------------------------------------

    @asynccontextmanager
    async def watch(
        self, namespace: str, key: str
    ) -> AsyncIterator[AsyncIterator[StateEntry | None]]:
        name = self._key(namespace, key)
        latest = LatestState()
        try:
            first = await self.kv.watch(name)
        except Exception as exc:
            raise self._unavailable(exc, f"watch {namespace}/…") from exc
        async with self._watches.opened(latest, self._follow(name, first, latest)) as states:
            yield states

    async def _follow(self, name: str, watcher: KeyValue.KeyWatcher, latest: LatestState) -> None:
        """Pass ``watcher``'s states on; after each reconnect, watch anew from the current state.

        An ordered consumer does not survive its server's restart, so each
        connection gets a watcher of its own.
        """
        while True:
            reader = asyncio.ensure_future(_pass_on(watcher, latest))
            try:
                await self.bus.wait_disconnected()
            finally:
                reader.cancel()
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await reader
                with contextlib.suppress(Exception):
                    await watcher.stop()  # type: ignore[no-untyped-call]
            watcher = await self._watch_again(name)

    async def _watch_again(self, name: str) -> KeyValue.KeyWatcher:
        while True:
            await self.bus.wait_connected()
            try:
                return await self.kv.watch(name)
            except Exception as exc:  # JetStream may take a moment after the server is back
                log.debug("watching %s again on %s: %s", name, self._where, exc)
                await asyncio.sleep(WATCH_RETRY_WAIT)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._watches.end_all()
        await self.bus.close()


async def _pass_on(watcher: KeyValue.KeyWatcher, latest: LatestState) -> None:
    started = False
    async for entry in watcher:
        if entry is None:  # nats-py's "that was the current state" marker
            if not started:
                latest.tell(None)  # no revision: the key is absent
            started = True
            continue
        started = True
        if entry.operation in (KV_DEL, KV_PURGE):
            latest.tell(None)
        else:
            assert entry.revision is not None
            latest.tell(StateEntry(entry.value or b"", entry.revision))


async def _open_bucket(bus: NatsBus, options: NatsStateOptions) -> KeyValue:
    """The bucket, made with the options' replicas and storage if it does not exist yet."""
    js = bus.nc.jetstream(timeout=options.timeout)
    try:
        kv = await js.key_value(options.bucket)
    except nats.js.errors.BucketNotFoundError:
        storage = api.StorageType.FILE if options.storage == "file" else api.StorageType.MEMORY
        try:
            return await js.create_key_value(
                bucket=options.bucket,
                description="toolbus state",
                history=1,
                replicas=options.replicas,
                storage=storage,
            )
        except nats.js.errors.BadRequestError:
            # Made by another replica at the same moment, with other settings.
            kv = await js.key_value(options.bucket)
    status = await kv.status()
    config = status.stream_info.config
    if not config.allow_msg_ttl:
        raise StateStoreError(
            f"the NATS bucket {options.bucket!r} does not allow per-message TTLs (it was made "
            "by something other than toolbus, or before nats-server 2.11); name another "
            "bucket with the 'bucket' option, or delete this one"
        )
    if config.num_replicas != options.replicas and "replicas" in options.model_fields_set:
        log.warning(
            "the NATS bucket %r keeps %s replicas, not the %s asked for; it was made "
            "before with other settings (change it with 'nats kv edit', or use another bucket)",
            options.bucket,
            config.num_replicas,
            options.replicas,
        )
    return kv


async def connect(url: str, options: Mapping[str, Any] | None = None) -> NatsStateStore:
    """Connect to the NATS state store at ``url`` (see :mod:`toolbus_nats.state_options`).

    Makes the bucket when it does not exist. Fails with
    :class:`~toolbus.domain.errors.StateStoreUnavailable` when no server answers
    within ``connect_timeout``, and with :class:`~toolbus.domain.errors.StateStoreError`
    when JetStream refuses the bucket.
    """
    settings = parse_state_options(url, options)
    servers = ",".join(settings.servers)
    try:
        bus = await connect_bus(f"nats://{servers}", settings.broker_options())
    except BusClosed as exc:
        raise StateStoreUnavailable(str(exc)) from None
    try:
        kv = await _open_bucket(bus, settings)
    except StateStoreError:
        await bus.close()
        raise
    except Exception as exc:
        await bus.close()
        raise StateStoreUnavailable(
            f"cannot open the NATS bucket {settings.bucket!r} at {servers}: {exc}; the state "
            "store needs JetStream (nats-server -js), and a cluster needs as many nodes up as "
            "the bucket's replicas"
        ) from exc
    return NatsStateStore(bus, kv, settings)


async def connect_beside_broker(
    url: str, options: Mapping[str, Any] | None = None
) -> NatsStateStore:
    """The state store on a NATS broker's own servers: the bucket ``toolbus`` on the
    servers, credentials and TLS of the *broker's* ``url`` and ``options``, leaving out
    what only a broker uses (its ``replicas`` make the bucket's)."""
    base, _, query = url.partition("?")
    given = {**dict(parse_qsl(query)), **dict(options or {})}
    kept = {name: value for name, value in given.items() if name not in BROKER_ONLY}
    return await connect(base, kept)
