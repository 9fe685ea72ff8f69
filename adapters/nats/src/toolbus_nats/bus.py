"""The NATS :class:`~toolbus.ports.Bus`: core NATS for non-persistent queues, JetStream otherwise.

One nats-py connection per bus. It reconnects on its own (for ever, by
default); while it is away, outgoing messages wait in a buffer of
``reconnect_buffer`` bytes and core subscriptions are renewed by nats-py when it
is back, pull subscriptions by us. Calls in flight whose messages were lost
with the server end with the caller's timeout; new calls work again as soon as
the connection is back, with no process restarted.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import nats.errors
from nats.aio.client import Client

from toolbus._internal.reachability import CHECK_TIMEOUT, refused_by_all
from toolbus.domain.calls.listing import ServedCounts, ServiceListing
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BrokerUnavailable, BusClosed
from toolbus.ports import MessageHandler
from toolbus_nats.errors import too_large, translate
from toolbus_nats.micro import ToolServiceListing, advertise
from toolbus_nats.naming import subject_for
from toolbus_nats.options import NatsOptions, parse_options
from toolbus_nats.provisioning import Streams
from toolbus_nats.publishing import headers_size, store
from toolbus_nats.security import security_kwargs
from toolbus_nats.subscription import CoreListener, CoreSubscription, PullSubscription

log = logging.getLogger("toolbus.nats")

_Source = TypeVar("_Source", bound=CoreSubscription | PullSubscription | CoreListener)

#: What a core subscription buffers before nats-py's own slow-consumer limits apply.
CORE_BUFFER_MESSAGES = 10_000
CORE_BUFFER_BYTES = 64 * 1024 * 1024


class NatsBus:
    """A connection to NATS. Make one with :func:`connect`."""

    def __init__(self, nc: Client, options: NatsOptions) -> None:
        self.nc = nc
        self.options = options
        self.streams = Streams(nc.jetstream(timeout=options.publish_timeout), options)
        self._routes: dict[str, tuple[str, bool]] = {}
        self._subscriptions: set[CoreSubscription | PullSubscription | CoreListener] = set()
        self._connected = asyncio.Event()
        self._disconnected = asyncio.Event()
        self._closing = False
        self._where = ",".join(options.servers)

    # -- connection events (nats-py callbacks) ---------------------------------------

    async def _on_disconnected(self) -> None:
        self._connected.clear()
        self._disconnected.set()
        if not self._closing:
            log.warning("lost the connection to NATS at %s; reconnecting", self._where)

    async def _on_reconnected(self) -> None:
        self._disconnected.clear()
        self._connected.set()
        log.info(
            "reconnected to NATS at %s", self.nc.connected_url and self.nc.connected_url.netloc
        )
        for subscription in list(self._subscriptions):
            if isinstance(subscription, PullSubscription):
                subscription.reconnected()

    async def _on_closed(self) -> None:
        self._connected.clear()
        self._disconnected.set()
        if self._closing:
            return
        error = BusClosed(
            f"the NATS connection to {self._where} was closed (reconnect attempts exhausted); "
            "check the server, then restart this process or connect again"
        )
        log.error("%s", error)
        for subscription in list(self._subscriptions):
            subscription.fail(error)

    async def _on_error(self, exc: Exception) -> None:
        if self._connected.is_set():
            log.warning("NATS at %s: %s", self._where, exc or type(exc).__name__)
        else:
            log.debug("NATS at %s: %s", self._where, exc or type(exc).__name__)

    @property
    def is_connected(self) -> bool:
        """True while the connection to a server is up."""
        return self.nc.is_connected

    async def wait_connected(self) -> None:
        """Return once connected (at once if already); for health checks and tests."""
        await self._connected.wait()

    async def wait_disconnected(self) -> None:
        """Return once the connection is known to be lost (at once if it is)."""
        await self._disconnected.wait()

    # -- Bus ------------------------------------------------------------------------------

    @property
    def max_message_size(self) -> int | None:
        """The server's ``max_payload`` (body plus properties must fit in it)."""
        return self.nc.max_payload

    def _route(self, queue: str) -> tuple[str, bool]:
        route = self._routes.get(queue)
        if route is None:
            parsed = parse_queue(queue)
            route = self._routes[queue] = (subject_for(parsed), parsed.persistent)
        return route

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        subject, persistent = self._routes.get(queue) or self._route(queue)
        headers = None
        size = len(body)
        if properties:
            headers = properties if type(properties) is dict else dict(properties)
            size += headers_size(headers)
        limit = self.nc.max_payload
        if size > limit:
            # The server would drop the whole connection over it: refuse here.
            raise too_large(size, limit)
        if persistent:
            await store(
                self.streams,
                subject,
                body,
                headers,
                timeout=self.options.publish_timeout,
                where=self._where,
            )
            return
        try:
            await self.nc.publish(subject, body, headers=headers)
        except Exception as exc:
            raise translate(exc, f"publish to {queue}", self._where) from exc

    async def subscribe(
        self, queue: str, group: str | None = None
    ) -> CoreSubscription | PullSubscription:
        self._check_open()
        subject, persistent = self._route(queue)
        subscription: CoreSubscription | PullSubscription
        if persistent:
            subscription = PullSubscription(
                self.nc, self.streams, subject, group, self._subscriptions.discard
            )
        else:
            subscription = CoreSubscription(
                self.nc,
                subject,
                group,
                self._subscriptions.discard,
                buffer_messages=CORE_BUFFER_MESSAGES,
                buffer_bytes=CORE_BUFFER_BYTES,
            )
        return await self._started(subscription, f"subscribe to {queue}")

    async def listen(self, queue: str, handler: MessageHandler) -> CoreListener | None:
        """Push a non-persistent queue's messages to ``handler`` (None for JetStream ones)."""
        self._check_open()
        subject, persistent = self._route(queue)
        if persistent:
            return None  # pull consumers ack one by one: read them as a subscription
        listener = CoreListener(self.nc, subject, handler, self._subscriptions.discard)
        return await self._started(listener, f"listen on {queue}")

    async def advertise(
        self, listing: ServiceListing, counts: Callable[[], ServedCounts]
    ) -> ToolServiceListing:
        """List a served tool service as a NATS micro service (see :mod:`toolbus_nats.micro`)."""
        self._check_open()
        subject, persistent = self._route(listing.request_queue)
        try:
            return await advertise(self.nc, listing, subject, persistent, counts)
        except Exception as exc:
            raise translate(exc, f"list {listing.service} as a micro service", self._where) from exc

    def _check_open(self) -> None:
        if self._closing or self.nc.is_closed:
            raise BusClosed(f"the NATS connection to {self._where} is closed")

    async def _started(self, source: _Source, action: str) -> _Source:
        """Start ``source`` and track it until it closes; closed again if starting fails."""
        try:
            await source.start()
        except Exception as exc:
            await source.close()
            raise translate(exc, action, self._where) from exc
        self._subscriptions.add(source)
        return source

    @property
    def connected(self) -> bool:
        """False while the connection to NATS is lost (nats-py is reconnecting)."""
        return bool(self.nc.is_connected)

    async def close(self) -> None:
        """Close every subscription (unacked persistent deliveries go back), then the connection.

        With the server gone there is nothing to tell it: the connection is
        dropped without waiting, and closing succeeds.
        """
        if self._closing:
            return
        self._closing = True
        for subscription in list(self._subscriptions):
            await subscription.close()
        if self.nc.is_closed:
            return
        try:
            await self.nc.close()
        # nats-py flushes what is pending while closing; uvloop raises RuntimeError
        # ("the handler is closed") for a write to a transport the lost server closed.
        except (OSError, RuntimeError, nats.errors.Error) as exc:
            log.debug("closing the NATS connection to %s: %s", self._where, exc)


def _is_fatal(exc: BaseException) -> bool:
    """Errors that retrying cannot fix: refused credentials, an untrusted certificate."""
    if isinstance(exc, ssl.SSLError | nats.errors.AuthorizationError):
        return True
    text = str(exc).lower()
    return "authorization violation" in text or "authentication" in text


async def connect(
    url: str = "nats://127.0.0.1:4222", options: Mapping[str, Any] | None = None
) -> NatsBus:
    """Connect to NATS at ``url`` (see :mod:`toolbus_nats.options` for the URL and options).

    Fails with :class:`~toolbus.domain.errors.BusClosed` naming the servers when
    none answers within ``connect_timeout`` seconds, and at once when nothing
    listens on any of them, the server refuses the credentials or the TLS
    certificate cannot be trusted.
    """
    settings = parse_options(url, options)
    nothing = await refused_by_all(settings.servers, min(CHECK_TIMEOUT, settings.connect_timeout))
    if nothing is not None:
        raise BrokerUnavailable(
            f"cannot connect to NATS at {','.join(settings.servers)}: {nothing}; check that "
            "nats-server runs there and that the URL is right"
        )
    nc = Client()
    bus = NatsBus(nc, settings)
    refused: asyncio.Future[BaseException] = asyncio.get_running_loop().create_future()

    async def on_error(exc: Exception) -> None:
        if not refused.done() and _is_fatal(exc):
            refused.set_result(exc)
        await bus._on_error(exc)

    # nats-py retries for ever when reconnects are unlimited; the first
    # connection gets a deadline so that a wrong URL fails clearly.
    attempt = asyncio.ensure_future(
        nc.connect(
            **settings.connection_kwargs(),
            **security_kwargs(settings),
            error_cb=on_error,
            disconnected_cb=bus._on_disconnected,
            reconnected_cb=bus._on_reconnected,
            closed_cb=bus._on_closed,
        )
    )
    first: list[asyncio.Future[Any]] = [attempt, refused]
    try:
        await asyncio.wait(
            first,
            timeout=settings.connect_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
    finally:
        if not attempt.done():
            attempt.cancel()
            await asyncio.gather(attempt, return_exceptions=True)
    failure = attempt.exception() if not attempt.cancelled() else None
    if attempt.cancelled() or failure is not None:
        reason = refused.result() if refused.done() else failure or nc.last_error
        bus._closing = True
        await nc.close()
        raise BrokerUnavailable(
            f"cannot connect to NATS at {bus._where}: {reason or 'no answer'}; check that "
            "nats-server runs there and that the URL, credentials and TLS options are right"
        ) from failure
    bus._connected.set()
    return bus
