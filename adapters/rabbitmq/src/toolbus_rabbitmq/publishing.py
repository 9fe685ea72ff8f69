"""Sending: one channel for each delivery guarantee, exchanges declared once.

* ``non-persistent://`` queues: a channel without publisher confirms, messages
  not persistent (delivery mode 1). ``publish`` returns once the message is
  handed to the connection; while the connection is down it fails at once
  (at most once: nothing waits for a broker that is away).
* ``persistent://`` queues: a channel with publisher confirms, messages
  persistent (delivery mode 2). ``publish`` returns once the broker has
  confirmed the message (written to disk, or to a quorum of nodes). A
  confirmation lost with the connection is waited out: the message is sent
  again once the connection is back, for up to ``publish_timeout`` (at least
  once: a copy may arrive twice, and toolbus services answer a repeated call
  from memory).

Properties travel as AMQP headers (the ``id`` TrustGraph correlates by among
them), the body as is. Each channel keeps the order messages were published in,
so the chunks of a streamed answer arrive in order.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping

import aiormq.exceptions
from aio_pika import DeliveryMode, Message
from aio_pika.abc import (
    AbstractExchange,
    AbstractRobustChannel,
    AbstractRobustConnection,
    HeadersType,
)

from toolbus_rabbitmq.errors import MessageRefused, RabbitMQUnavailable, translate
from toolbus_rabbitmq.options import RabbitMQOptions
from toolbus_rabbitmq.provisioning import declare_exchange

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

    async def _channel(self, persistent: bool) -> AbstractRobustChannel:
        async with self._opening:
            channel = self._confirming if persistent else self._fast
            if channel is None:
                channel = self._connection.channel(publisher_confirms=persistent)
                await channel
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
        except Exception as exc:
            raise self._failure(exc, exchange_name, len(body)) from exc

    async def _publish_confirmed(
        self, exchange_name: str, body: bytes, headers: HeadersType | None
    ) -> None:
        message = Message(body, headers=headers, delivery_mode=DeliveryMode.PERSISTENT)
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
            return MessageRefused(size, exchange_name, str(exc))
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
