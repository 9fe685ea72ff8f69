"""The RabbitMQ :class:`~toolbus.ports.Bus`: one robust AMQP connection, channels per job.

A queue is a fanout exchange named as TrustGraph names it
(:mod:`toolbus_rabbitmq.naming`); publishing goes through
:mod:`toolbus_rabbitmq.publishing`, each subscription and listener has a channel
and a queue of its own (:mod:`toolbus_rabbitmq.subscription`), declared as
:mod:`toolbus_rabbitmq.provisioning` says.

The connection is aio-pika's *robust* connection: when the broker goes away it
tries again every ``reconnect_interval`` for ever (to the next of ``servers``
each time, when several are given), and once it is back it opens every channel
again and declares their exchanges, queues, bindings and consumers again. No
process needs restarting; calls in flight while the broker was away end with
their callers' timeouts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import aio_pika
from aio_pika.abc import AbstractQueue, AbstractRobustChannel
from pamqp.common import FieldTable
from yarl import URL

from toolbus._internal.reachability import CHECK_TIMEOUT, refused_by_all
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BusClosed
from toolbus.ports import MessageHandler
from toolbus_rabbitmq.errors import (
    CHECK_LOGIN,
    RabbitMQUnavailable,
    login_refused,
    too_large,
    translate,
    why_not_connected,
)
from toolbus_rabbitmq.logs import throttle_client_logs
from toolbus_rabbitmq.naming import exchange_for
from toolbus_rabbitmq.options import RabbitMQOptions, parse_options
from toolbus_rabbitmq.provisioning import declare_exchange, declare_queue
from toolbus_rabbitmq.publishing import Publisher
from toolbus_rabbitmq.security import credentials, tls_context
from toolbus_rabbitmq.subscription import Listener, RabbitMQSubscription

log = logging.getLogger("toolbus.rabbitmq")

#: Reconnection intervals between moves to the next node (see RabbitMQBus._next_nodes).
_NODE_STEP = 1.5

_Reader = TypeVar("_Reader", RabbitMQSubscription, Listener)


class RabbitMQBus:
    """A connection to RabbitMQ. Make one with :func:`connect`."""

    def __init__(
        self,
        connection: aio_pika.RobustConnection,
        options: RabbitMQOptions,
        node_urls: list[URL],
    ) -> None:
        self.connection = connection
        self.options = options
        self._where = ",".join(options.servers)
        self._publisher = Publisher(connection, options, self._where)
        self._routes: dict[str, tuple[str, bool]] = {}
        self._readers: set[RabbitMQSubscription | Listener] = set()
        self._closing = False
        #: Connected as far as this bus has been told; aio-pika reports each failed
        #: reconnection attempt as a close too, and only the first one is news.
        self._up = True
        self._node_urls = node_urls
        self._failover: asyncio.Task[None] | None = None
        connection.close_callbacks.add(self._on_connection_lost)
        connection.reconnect_callbacks.add(self._on_reconnected)

    # -- connection events -------------------------------------------------------------

    def _on_connection_lost(self, _: object, error: BaseException | None = None) -> None:
        if self._closing or not self._up:
            return
        self._up = False
        log.warning(
            "lost the connection to RabbitMQ at %s (%s); reconnecting every %g s",
            self._where,
            error or "closed",
            self.options.reconnect_interval,
        )
        if len(self._node_urls) > 1 and self._failover is None:
            self._failover = asyncio.ensure_future(self._next_nodes())

    def _on_reconnected(self, _: object) -> None:
        self._up = True
        log.info("reconnected to RabbitMQ at %s", self.connection.url.host)

    async def _next_nodes(self) -> None:
        """While the connection is down, move the node reconnection attempts go to.

        aio-pika reads the connection's URL at each attempt, one every
        ``reconnect_interval``, and tells of none that fails. Moving on every
        one and a half intervals keeps the two out of step, so that attempts
        reach every node in turn; moving on every interval could lock in step
        and send every attempt to the node that is gone.
        """
        try:
            while not self.connection.connected.is_set() and not self._closing:
                current = self._node_urls.index(self.connection.url)
                self.connection.url = self._node_urls[(current + 1) % len(self._node_urls)]
                await asyncio.sleep(self.options.reconnect_interval * _NODE_STEP)
        finally:
            self._failover = None

    @property
    def connected(self) -> bool:
        """False while the connection to RabbitMQ is lost (it is being restored)."""
        return self.connection.connected.is_set() and not self.connection.is_closed

    # -- Bus ----------------------------------------------------------------------------

    @property
    def max_message_size(self) -> int:
        return self.options.max_message_size

    def _route(self, queue: str) -> tuple[str, bool]:
        route = self._routes.get(queue)
        if route is None:
            parsed = parse_queue(queue)
            route = self._routes[queue] = (exchange_for(parsed), parsed.persistent)
        return route

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        if self._closing:
            raise BusClosed(f"the RabbitMQ connection to {self._where} is closed")
        exchange, persistent = self._routes.get(queue) or self._route(queue)
        limit = self.options.max_message_size
        if len(body) > limit:
            raise too_large(len(body), limit)
        await self._publisher.publish(exchange, persistent, body, properties)

    async def subscribe(self, queue: str, group: str | None = None) -> RabbitMQSubscription:
        def reader(
            channel: AbstractRobustChannel, amqp_queue: AbstractQueue, persistent: bool
        ) -> RabbitMQSubscription:
            return RabbitMQSubscription(channel, amqp_queue, persistent)

        return await self._open(queue, group, reader, f"subscribe to {queue}")

    async def listen(self, queue: str, handler: MessageHandler) -> Listener:
        """Push every message on ``queue`` to ``handler`` from the consumer's callback."""

        def reader(
            channel: AbstractRobustChannel, amqp_queue: AbstractQueue, persistent: bool
        ) -> Listener:
            return Listener(channel, amqp_queue, persistent, handler)

        return await self._open(queue, None, reader, f"listen on {queue}")

    async def _open(
        self,
        queue: str,
        group: str | None,
        make: Callable[[AbstractRobustChannel, AbstractQueue, bool], _Reader],
        doing: str,
    ) -> _Reader:
        """A reader of ``queue`` on a channel of its own, consuming before this returns."""
        exchange, persistent = self._route(queue)
        channel = await self._channel(doing)
        try:
            # The broker's flow control; a listener of a non-persistent queue takes
            # its messages unacknowledged, which prefetch does not bound.
            await channel.set_qos(prefetch_count=self.options.prefetch)
            amqp_queue = await declare_queue(
                channel, await declare_exchange(channel, exchange), group, persistent, self.options
            )
            reader = make(channel, amqp_queue, persistent)
            await reader.start()
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await channel.close()
            if isinstance(exc, Exception):
                raise translate(exc, doing, self._where) from exc
            raise
        return self._track(reader)

    async def _channel(self, doing: str) -> AbstractRobustChannel:
        if self._closing:
            raise BusClosed(f"the RabbitMQ connection to {self._where} is closed")
        if not self.connected:
            raise RabbitMQUnavailable(
                f"cannot {doing}: the connection to RabbitMQ at {self._where} is down "
                "(it is being restored); try again"
            )
        try:
            channel = self.connection.channel()
            await channel
        except Exception as exc:
            raise translate(exc, doing, self._where) from exc
        return channel

    def _track(self, reader: _Reader) -> _Reader:
        self._readers = {r for r in self._readers if not r.closed}
        self._readers.add(reader)
        return reader

    async def close(self) -> None:
        """Close every subscription (unacked persistent deliveries go back), then the connection."""
        if self._closing:
            return
        self._closing = True
        if self._failover is not None:
            self._failover.cancel()
        readers, self._readers = list(self._readers), set()
        await asyncio.gather(*(reader.close() for reader in readers), return_exceptions=True)
        await self._publisher.close()
        try:
            await self.connection.close()
        except Exception as exc:
            log.debug("closing the RabbitMQ connection to %s: %s", self._where, exc)


def node_urls(options: RabbitMQOptions) -> list[URL]:
    """The AMQP URL of each node, with the credentials and connection settings."""
    user, password = credentials(options)
    # aiormq reads the vhost from the path, "%2F" standing for "/".
    path = "/" + options.vhost.replace("/", "%2F")
    query = {
        "heartbeat": str(options.heartbeat),
        "reconnect_interval": str(options.reconnect_interval),
    }
    urls = []
    for server in options.servers:
        host, _, port = server.rpartition(":")
        urls.append(
            URL.build(
                scheme="amqps" if options.uses_tls else "amqp",
                host=host.strip("[]"),
                port=int(port),
                user=user,
                password=password,
                path=path,
                query=query,
            )
        )
    return urls


async def connect(url: str, options: Mapping[str, Any] | None = None) -> RabbitMQBus:
    """Connect to RabbitMQ at ``url`` (``amqp://host:port[,host:port][/vhost][?option=...]``).

    The nodes are tried in turn; the first that accepts the login is used. Fails
    with :class:`~toolbus_rabbitmq.errors.RabbitMQUnavailable` (a ``BusClosed``)
    naming the nodes when none does within ``connect_timeout`` seconds each (at
    once, saying so, when nothing listens on any of them), and with
    :class:`~toolbus.domain.errors.BrokerOptionError` for a bad URL or option.
    See :class:`~toolbus_rabbitmq.options.RabbitMQOptions` and ``docs/adapters/rabbitmq.md``.
    """
    settings = parse_options(url, options)
    nothing = await refused_by_all(settings.servers, min(CHECK_TIMEOUT, settings.connect_timeout))
    if nothing is not None:
        raise RabbitMQUnavailable(
            f"cannot connect to RabbitMQ at {','.join(settings.servers)}: {nothing}; check "
            "that RabbitMQ runs there and that the URL is right"
        )
    throttle_client_logs()
    urls = node_urls(settings)
    context = tls_context(settings)
    properties: FieldTable | None = {"connection_name": settings.name} if settings.name else None
    failures: list[str] = []
    refusals = 0
    for index, node in enumerate(urls):
        try:
            connection = await aio_pika.connect_robust(
                node,
                connection_class=aio_pika.RobustConnection,
                ssl_context=context,
                timeout=settings.connect_timeout,
                client_properties=properties,
            )
        except Exception as exc:
            failures.append(f"{settings.servers[index]} {why_not_connected(exc)}")
            refusals += login_refused(exc)
            continue
        # Later nodes first, so that a reconnection tries the others in turn.
        return RabbitMQBus(connection, settings, urls[index:] + urls[:index])
    # One piece of advice, after every node's few words: the one that fits when every
    # node refused the login, else what to check in general.
    advice = (
        CHECK_LOGIN
        if refusals == len(failures)
        else "check that RabbitMQ runs there and that the URL, credentials and TLS options "
        "are right"
    )
    raise RabbitMQUnavailable(f"cannot connect to RabbitMQ: {'; '.join(failures)}; {advice}")
