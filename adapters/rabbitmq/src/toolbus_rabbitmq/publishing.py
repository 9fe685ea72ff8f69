"""Sending: one channel for each delivery guarantee, exchanges declared once.

* ``non-persistent://`` queues: a channel without publisher confirms, messages
  not persistent (delivery mode 1). ``publish`` returns once the message is
  handed to the connection; while the connection is down it fails at once
  (at most once: nothing waits for a broker that is away).
* ``persistent://`` queues: a channel with publisher confirms, messages
  persistent (delivery mode 2) and stamped with the time they were sent.
  ``publish`` returns once the broker has confirmed the message (written to
  disk, or to a quorum of nodes). A confirmation lost with the connection is
  waited out: the message is sent again once the connection is back, for up
  to ``publish_timeout`` (at least once: a copy may arrive twice, and toolbus
  services answer a repeated call from memory).

Properties travel as AMQP headers (the ``id`` TrustGraph correlates by among
them), the body as is. Each channel keeps the order messages were published in,
so the chunks of a streamed answer arrive in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

import aiormq.exceptions
from aio_pika import DeliveryMode, Message
from aio_pika.abc import (
    AbstractExchange,
    AbstractRobustChannel,
    AbstractRobustConnection,
    HeadersType,
)

from toolbus_rabbitmq.errors import (
    RabbitMQUnavailable,
    message_refused,
    translate,
)
from toolbus_rabbitmq.naming import PUBLISHED_AT_HEADER
from toolbus_rabbitmq.options import RabbitMQOptions
from toolbus_rabbitmq.provisioning import declare_exchange

log = logging.getLogger("toolbus.rabbitmq")

_HOW_TO_RAISE_LIMIT = (
    "It was over the broker's own max_message_size: raise that in rabbitmq.conf, or "
    "lower the adapter's max_message_size to it so that such a message is refused "
    "before it is sent"
)

#: Seconds between looks at a channel the broker closed, while aio-pika opens it again.
_REOPEN_POLL = 0.01
_REOPEN_POLL_MAX = 0.5

#: Failures that mean the connection (or the channel with it) went away mid-publish.
_LOST = (
    aiormq.exceptions.ChannelInvalidStateError,
    aiormq.exceptions.ConnectionClosed,
    aiormq.exceptions.AMQPConnectionError,
    ConnectionError,
)


class Publisher:
    """Publishes to fanout exchanges, declaring each on first use."""

    def __init__(
        self, connection: AbstractRobustConnection, options: RabbitMQOptions, where: str
    ) -> None:
        self._connection = connection
        self._options = options
        self._where = where
        self._fast: AbstractRobustChannel | None = None
        self._confirming: AbstractRobustChannel | None = None
        #: (exchange name, persistent) -> the exchange on the matching channel.
        self._exchanges: dict[tuple[str, bool], AbstractExchange] = {}
        self._opening = asyncio.Lock()
        #: The broker's last refusal logged (aio-pika reports a close more than once).
        self._last_refusal: BaseException | None = None

    async def _channel(self, persistent: bool) -> AbstractRobustChannel:
        async with self._opening:
            channel = self._confirming if persistent else self._fast
            if channel is None:
                channel = self._connection.channel(publisher_confirms=persistent)
                await channel
                if not persistent:  # a persistent publish hears of a refusal itself
                    channel.close_callbacks.add(self._on_channel_closed)
                if persistent:
                    self._confirming = channel
                else:
                    self._fast = channel
            return channel

    async def _exchange(self, name: str, persistent: bool) -> AbstractExchange:
        key = (name, persistent)
        exchange = self._exchanges.get(key)
        if exchange is None:
            try:
                channel = await self._channel(persistent)
                exchange = self._exchanges[key] = await declare_exchange(channel, name)
            except Exception as exc:
                raise translate(exc, f"declare the exchange {name!r}", self._where) from exc
        return exchange

    async def publish(
        self,
        exchange_name: str,
        persistent: bool,
        body: bytes,
        properties: Mapping[str, str] | None,
    ) -> None:
        headers: HeadersType | None = dict(properties) if properties else None
        if persistent:
            await self._publish_confirmed(exchange_name, body, headers)
            return
        if not self._connection.connected.is_set():
            raise RabbitMQUnavailable(
                f"cannot publish to exchange {exchange_name!r}: the connection to RabbitMQ at "
                f"{self._where} is down (it is being restored); the message was not sent"
            )
        exchange = self._exchanges.get((exchange_name, False)) or await self._exchange(
            exchange_name, False
        )
        message = Message(body, headers=headers, delivery_mode=DeliveryMode.NOT_PERSISTENT)
        try:
            await exchange.publish(message, routing_key="", mandatory=False)
        except aiormq.exceptions.ChannelInvalidStateError as exc:
            # The broker closed the channel (over an earlier message) and aio-pika is
            # opening it again: with the connection up, that takes a round trip.
            await self._send_when_reopened(exchange, message, exc)
        except Exception as exc:
            raise self._failure(exc, exchange_name, len(body)) from exc

    async def _send_when_reopened(
        self, exchange: AbstractExchange, message: Message, error: Exception
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.publish_timeout
        pause = _REOPEN_POLL
        while self._connection.connected.is_set() and loop.time() + pause < deadline:
            # aio-pika tells of the close before it starts opening the channel again,
            # and the channel says "ready" until then: look again shortly after.
            await asyncio.sleep(pause)
            pause = min(pause * 2, _REOPEN_POLL_MAX)
            try:
                async with asyncio.timeout_at(deadline):
                    await exchange.publish(message, routing_key="", mandatory=False)
                return
            except aiormq.exceptions.ChannelInvalidStateError as again:
                error = again  # not open again yet
            except Exception as again:
                error = again
                break
        raise self._failure(error, exchange.name, len(message.body)) from error

    def _on_channel_closed(self, _: object, error: BaseException | None = None) -> None:
        """The broker closed a publishing channel over a message it refused: say why.

        A message on a non-persistent queue is not confirmed, so its ``publish``
        has returned already; this is where its refusal shows.
        """
        # The broker's own reasons come as subclasses (PRECONDITION_FAILED ...); a
        # plain ChannelClosed is aio-pika closing the channel's previous incarnation.
        if (
            isinstance(error, aiormq.exceptions.ChannelClosed)
            and type(error) is not aiormq.exceptions.ChannelClosed
            and error is not self._last_refusal
        ):
            self._last_refusal = error
            log.warning(
                "RabbitMQ at %s refused a message and closed the channel it came on "
                "(%s); the channel is opened again. %s",
                self._where,
                error,
                _HOW_TO_RAISE_LIMIT if "max size" in str(error) else "",
            )

    async def _publish_confirmed(
        self, exchange_name: str, body: bytes, headers: HeadersType | None
    ) -> None:
        # When it was sent, for services that check call tokens as of then.
        stamped: HeadersType = {**(headers or {}), PUBLISHED_AT_HEADER: time.time_ns() // 1_000_000}
        message = Message(body, headers=stamped, delivery_mode=DeliveryMode.PERSISTENT)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._options.publish_timeout
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    exchange = await self._exchange(exchange_name, True)
                    await exchange.publish(message, routing_key="", mandatory=False)
                return
            except TimeoutError as exc:
                raise RabbitMQUnavailable(
                    f"RabbitMQ at {self._where} did not confirm a message on exchange "
                    f"{exchange_name!r} within publish_timeout "
                    f"({self._options.publish_timeout:g} s); it may or may not have been kept"
                ) from exc
            except _LOST:
                # Lost with the connection: send it again once the channel is back.
                # A copy may have arrived; at-least-once allows it.
                try:
                    async with asyncio.timeout_at(deadline):
                        await (await self._channel(True)).ready()
                except TimeoutError:
                    continue  # reported by the next round's timeout
            except Exception as exc:
                raise self._failure(exc, exchange_name, len(body)) from exc

    def _failure(self, exc: Exception, exchange_name: str, size: int) -> Exception:
        if isinstance(exc, aiormq.exceptions.ChannelPreconditionFailed) and "max size" in str(exc):
            return message_refused(size, exchange_name, str(exc))
        return translate(exc, f"publish to exchange {exchange_name!r}", self._where)

    async def close(self) -> None:
        for channel in (self._fast, self._confirming):
            if channel is not None:
                # Closed for good even while the connection is down (a robust
                # channel would otherwise be opened again); it is going away anyway.
                with contextlib.suppress(Exception):
                    await channel.close()
        self._fast = self._confirming = None
        self._exchanges.clear()
