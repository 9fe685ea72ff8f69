"""Reading: a channel and a consumer per subscription, deliveries handed on in order.

Each subscription has a channel of its own, with ``prefetch`` as its QoS: the
broker sends it at most that many deliveries it has not acknowledged. Its
consumer's callback offers each delivery to the subscription's
:class:`~toolbus._internal.delivery_buffer.DeliveryBuffer`, which its readers
(a service's pool of workers) take from.

* On ``persistent://`` queues a delivery is acknowledged when the reader acks it
  and handed back (``basic.nack`` with requeue, so it is delivered again marked
  redelivered) when it nacks. Deliveries not acknowledged when the channel
  closes, or the connection is lost, or the process dies, go back to the queue
  for the group's other members: at least once. ``prefetch`` bounds the calls a
  member runs and holds at once.
* On ``non-persistent://`` queues a delivery is acknowledged as a reader takes
  it: at most once, and ``prefetch`` bounds what waits in the buffer.
* A :class:`Listener` (push) hands each message to its handler from the
  consumer's callback, in order; on a non-persistent queue the broker does not
  wait for acknowledgements at all.

After a reconnection aio-pika's robust channel declares the queue again and
restarts the consumer; a delivery taken before the connection was lost can no
longer be acknowledged (the broker has put it back already) and its ``ack`` is
a no-op.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Mapping

import aiormq.exceptions
from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustChannel

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer
from toolbus.ports import Delivery, MessageHandler
from toolbus_rabbitmq.naming import PUBLISHED_AT_HEADER

log = logging.getLogger("toolbus.rabbitmq")

_EMPTY: Mapping[str, str] = {}
#: An ack or nack that cannot reach the broker: the channel (or connection) it
#: came on is gone, and the broker has put the message back already.
_CHANNEL_GONE = (aiormq.exceptions.ChannelInvalidStateError, aiormq.exceptions.AMQPError)


def properties_of(message: AbstractIncomingMessage) -> Mapping[str, str]:
    """A message's AMQP headers as toolbus properties (``str -> str``).

    Headers written by other clients may hold other types, or text that is not
    UTF-8 (aio-pika then gives bytes): never fail on them. The publish time is
    the delivery's ``enqueued_at``, not a property.
    """
    headers = message.headers
    if not headers:
        return _EMPTY
    properties: dict[str, str] = {}
    for key, value in headers.items():
        if key == PUBLISHED_AT_HEADER:
            continue
        if isinstance(value, str):
            properties[key] = value
        elif isinstance(value, bytes | bytearray):
            properties[key] = bytes(value).decode("utf-8", "replace")
        elif value is not None:
            properties[key] = str(value)
    return properties


def published_at(message: AbstractIncomingMessage) -> float | None:
    """When ``message`` was published (Unix seconds): the time its publisher (or the
    broker, where set up to stamp messages) wrote into it; None when nobody did."""
    stamp = (message.headers or _EMPTY).get(PUBLISHED_AT_HEADER)
    if isinstance(stamp, int | float) and not isinstance(stamp, bool):
        return stamp / 1000
    # AMQP's own timestamp property: whole seconds, from other publishers.
    return message.timestamp.timestamp() if message.timestamp is not None else None


class RabbitMQDelivery:
    """One AMQP delivery as the subscriber sees it."""

    __slots__ = ("_message", "_settled", "body", "enqueued_at", "properties", "redelivered")

    def __init__(self, message: AbstractIncomingMessage, *, manual: bool) -> None:
        self._message = message
        #: Already settled (acked as it was handed out, or needing no ack at all).
        self._settled = not manual
        self.body = message.body
        self.properties = properties_of(message)
        self.redelivered = bool(message.redelivered)
        #: When it was published, where that is known (persistent queues).
        self.enqueued_at = published_at(message)

    async def ack(self) -> None:
        if not self._settled:
            self._settled = True
            await _settle(self._message, ack=True)

    async def nack(self) -> None:
        if not self._settled:
            self._settled = True
            await _settle(self._message, ack=False)


async def _settle(message: AbstractIncomingMessage, *, ack: bool) -> None:
    """Ack (or nack, with requeue) ``message``; a no-op if its channel is gone."""
    tag = message.delivery_tag
    if tag is None:
        return
    try:
        channel = message.channel
        if ack:
            await channel.basic_ack(tag, wait=False)
        else:
            await channel.basic_nack(tag, requeue=True, wait=False)
    except _CHANNEL_GONE:
        log.debug("delivery %s: its channel is gone; the broker has requeued it", tag)


class RabbitMQSubscription:
    """A subscription: the queue, its channel and consumer, and the buffer readers take from."""

    def __init__(self, channel: AbstractRobustChannel, queue: AbstractQueue, persistent: bool):
        self.channel = channel
        self.queue = queue
        self.persistent = persistent
        self._buffer: DeliveryBuffer[RabbitMQDelivery] = DeliveryBuffer()
        self._consumer_tag: str | None = None
        self.closed = False

    async def start(self) -> None:
        """Start consuming; deliveries arrive from now on."""
        self._consumer_tag = await self.queue.consume(self._on_message, no_ack=False)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        # aio-pika runs it as a task per message, started in the order they came;
        # it never waits, so they reach the buffer in that order. Once closed,
        # what still arrives goes back to the queue with the channel.
        if not self.closed:
            self._buffer.offer(RabbitMQDelivery(message, manual=self.persistent))

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        buffer = self._buffer
        try:
            delivery = await buffer.get()
        except BufferClosed:
            raise StopAsyncIteration from None
        if not self.persistent:
            try:
                # At most once: acknowledged as it is handed out. Queued for the
                # socket without waiting, unless the connection's buffer is full.
                await _settle(delivery._message, ack=True)
            except asyncio.CancelledError:
                buffer.push_front(delivery)  # a cancelled read loses nothing
                raise
        return delivery

    def fail(self, error: BaseException) -> None:
        """The bus can no longer deliver: readers get ``error``."""
        self._buffer.close(error)

    async def stop_intake(self) -> None:
        """Cancel the consumer (the queue's other consumers get what comes next); hand
        out what was delivered here. A delivery arriving later is never acked, so the
        broker requeues it with the channel."""
        tag, self._consumer_tag = self._consumer_tag, None
        if tag is not None and not self.closed:
            try:
                await self.queue.cancel(tag)
            except Exception:  # the channel is going away: the broker requeues the rest
                log.debug("cancelling consumer %s failed", tag, exc_info=True)
        self._buffer.finish()

    async def close(self) -> None:
        """Stop; deliveries not acknowledged go back to the queue (closing the channel)."""
        if self.closed:
            return
        self.closed = True
        self._buffer.close()
        self._buffer.take_all()
        await _close_channel(self.channel)


class Listener:
    """Pushes a queue's messages to a handler from the consumer's callback."""

    def __init__(
        self,
        channel: AbstractRobustChannel,
        queue: AbstractQueue,
        persistent: bool,
        handler: MessageHandler,
    ) -> None:
        self.channel = channel
        self.queue = queue
        self.persistent = persistent
        self._handler = handler
        self.closed = False
        self._ended = False

    async def start(self) -> None:
        await self.queue.consume(self._on_message, no_ack=not self.persistent)

    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        # In order, as the subscription's: nothing here waits.
        if self.closed:
            return
        delivery = RabbitMQDelivery(message, manual=False)
        try:
            self._handler.on_message(delivery)
        except Exception:  # one bad message must not end the listener
            log.exception("a listener's handler failed on %s; message dropped", self.queue.name)
        if self.persistent:
            # Acked once the handler has returned, whatever it did.
            await _settle(message, ack=True)

    def fail(self, error: BaseException) -> None:
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        if not self._ended:
            self._ended = True
            self._handler.on_end(error)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await _close_channel(self.channel)
        self._end(None)


async def _close_channel(channel: AbstractRobustChannel) -> None:
    """Close ``channel`` for good: a robust channel closed while its connection is
    down would otherwise be opened again, with its consumer, once it is back."""
    try:
        await channel.close()
    except Exception:  # the connection is going away anyway
        log.debug("closing a RabbitMQ channel failed", exc_info=True)
