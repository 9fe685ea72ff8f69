"""An in-process message broker with the delivery rules of a real one.

Competing consumers share one buffer per group; fan-out subscribers get a buffer
each. Buffers are bounded: a publisher waits while any target buffer is full
(backpressure). On ``persistent://`` queues every delivery stays *unacked* until
``ack``; ``nack`` or closing the subscription puts it back at the front of its
buffer, marked redelivered. Non-persistent queues forget a message once handed
out. Messages published when nobody subscribes are dropped, as on the brokers.

The hot path is plain ``asyncio`` futures and deques: no memory streams, no
tasks per message. Everything runs on one event loop; brokers are per loop.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urlsplit

import pydantic

from toolbus._internal.broker_options import BrokerOptions, parse_broker_options
from toolbus._internal.delivery_buffer import DeliveryBuffer
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BrokerOptionError, BusClosed, MessageTooLarge
from toolbus.ports import Delivery, MessageHandler

log = logging.getLogger("toolbus.memory")

DEFAULT_BUFFER = 10_000
DEFAULT_MAX_MESSAGE = 64 * 1024 * 1024
_EMPTY: Mapping[str, str] = {}


class _Closed(Exception):
    """Wakes a consumer whose subscription was closed."""


class _Push:
    """A fan-out target that hands each message to a handler as it is published.

    It never holds a message, so a publisher always finds room.
    """

    __slots__ = ("handler", "items", "limit")

    def __init__(self, handler: MessageHandler) -> None:
        self.handler = handler
        self.items: tuple[()] = ()
        self.limit = 1

    def offer(self, item: MemoryDelivery) -> None:
        try:
            self.handler.on_message(item)
        except Exception:  # the handler's failure is not the publisher's
            log.exception("a listener's handler failed; message dropped")

    async def put(self, item: MemoryDelivery) -> None:
        self.offer(item)


class MemoryListener:
    """A running :meth:`MemoryBus.listen`."""

    def __init__(self, bus: MemoryBus, topic: _Topic, target: _Push) -> None:
        self.bus = bus
        self.topic = topic
        self.target = target
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.bus.listeners.discard(self)
        self.topic.fanout.remove(self.target)
        self.topic.refresh()
        self.target.handler.on_end(None)


class MemoryDelivery:
    """A message as one consumer sees it."""

    __slots__ = ("_consumer", "_settled", "body", "properties", "redelivered")

    def __init__(self, body: bytes, properties: Mapping[str, str], redelivered: bool) -> None:
        # Plain attributes rather than read-only properties: read on every call.
        self.body = body
        self.properties = properties
        self.redelivered = redelivered
        self._consumer: MemorySubscription | None = None
        self._settled = False

    async def ack(self) -> None:
        consumer = self._consumer
        if consumer is not None and not self._settled:
            self._settled = True
            consumer.unacked.discard(self)

    async def nack(self) -> None:
        consumer = self._consumer
        if consumer is not None and not self._settled:
            self._settled = True
            consumer.unacked.discard(self)
            consumer.buffer.push_front(self.again())

    def again(self) -> MemoryDelivery:
        return MemoryDelivery(self.body, self.properties, True)


class MemorySubscription:
    """One subscription: a fan-out buffer of its own, or a seat in a group."""

    def __init__(
        self,
        bus: MemoryBus,
        topic: _Topic,
        buffer: DeliveryBuffer[MemoryDelivery],
        persistent: bool,
    ) -> None:
        self.bus = bus
        self.topic = topic
        self.buffer = buffer
        self.persistent = persistent
        self.unacked: set[MemoryDelivery] = set()
        # Pending reads: several tasks may read one subscription at once (a worker pool).
        self.waiting: set[asyncio.Future[None]] = set()
        self.closed = False

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        buffer = self.buffer
        while True:
            if self.closed:
                raise StopAsyncIteration
            delivery = buffer.take()
            if delivery is not None:
                break
            getter = buffer.wait()
            self.waiting.add(getter)
            try:
                await getter
            except _Closed:
                raise StopAsyncIteration from None
            except asyncio.CancelledError:
                if getter.done() and not getter.cancelled() and getter.exception() is None:
                    buffer.pass_wake()  # woken in the same instant: the wake is not lost
                raise
            finally:
                self.waiting.discard(getter)
            if self.closed:
                buffer.pass_wake()  # type: ignore[unreachable]  # close() ran meanwhile
                raise StopAsyncIteration
            buffer.woke()
        if self.persistent:
            delivery._consumer = self
            self.unacked.add(delivery)
        return delivery

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.bus.subscriptions.discard(self)
        self.topic.leave(self)
        # A consumer that goes away without acking gives its messages back.
        for delivery in self.unacked:
            delivery._settled = True
            self.buffer.push_front(delivery.again())
        self.unacked.clear()
        # End our own pending reads; one already woken passes its wake on to
        # another consumer when ``__anext__`` sees the subscription closed.
        for waiting in list(self.waiting):
            if not waiting.done():
                waiting.set_exception(_Closed())


class _Topic:
    __slots__ = ("fanout", "group_members", "groups", "targets")

    def __init__(self) -> None:
        self.groups: dict[str, DeliveryBuffer[MemoryDelivery]] = {}
        self.group_members: dict[str, int] = {}
        self.fanout: list[DeliveryBuffer[MemoryDelivery] | _Push] = []
        #: Every buffer a message goes to: one per group, one per fan-out subscriber.
        self.targets: tuple[DeliveryBuffer[MemoryDelivery] | _Push, ...] = ()

    def refresh(self) -> None:
        self.targets = (*self.groups.values(), *self.fanout)

    def leave(self, sub: MemorySubscription) -> None:
        for name, buffer in self.groups.items():
            if buffer is sub.buffer:
                self.group_members[name] -= 1
                return
        if sub.buffer in self.fanout:
            self.fanout.remove(sub.buffer)
            self.refresh()


class MemoryBroker:
    """The shared state behind every :class:`MemoryBus` of one name on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, buffer_size: int = DEFAULT_BUFFER) -> None:
        self.loop = loop
        self.buffer_size = buffer_size
        self.topics: dict[str, _Topic] = {}

    def topic(self, queue: str) -> _Topic:
        topic = self.topics.get(queue)
        if topic is None:
            parse_queue(queue)  # reject names no real broker could carry
            topic = self.topics[queue] = _Topic()
        return topic


_BROKERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, MemoryBroker]] = (
    weakref.WeakKeyDictionary()
)


def broker_for(name: str, buffer_size: int = DEFAULT_BUFFER) -> MemoryBroker:
    """The broker called ``name`` on the running loop, made on first use."""
    loop = asyncio.get_running_loop()
    brokers = _BROKERS.setdefault(loop, {})
    broker = brokers.get(name)
    if broker is None:
        broker = brokers[name] = MemoryBroker(loop, buffer_size)
    return broker


class MemoryBus:
    """A connection to a :class:`MemoryBroker`; closing it closes its subscriptions."""

    def __init__(self, broker: MemoryBroker, max_message_size: int = DEFAULT_MAX_MESSAGE) -> None:
        self.broker = broker
        self._max_message_size = max_message_size
        self.subscriptions: set[MemorySubscription] = set()
        self.listeners: set[MemoryListener] = set()
        self.closed = False

    @property
    def max_message_size(self) -> int | None:
        return self._max_message_size

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        if self.closed:
            raise BusClosed("the in-memory bus connection is closed")
        if len(body) > self._max_message_size:
            raise MessageTooLarge(
                len(body),
                self._max_message_size,
                "raise it with memory://?max_message_size=BYTES",
            )
        topic = self.broker.topics.get(queue) or self.broker.topic(queue)
        props = dict(properties) if properties else _EMPTY
        for buffer in topic.targets:
            if len(buffer.items) < buffer.limit:
                buffer.offer(MemoryDelivery(body, props, False))  # no await: room to spare
            else:
                await buffer.put(MemoryDelivery(body, props, False))

    def has_consumers(self, queue: str) -> bool:
        """True while a competing-consumer group holds a buffer on ``queue``.

        A group's buffer outlives its members, and keeps messages for the next
        one, so a group with no member right now still counts.
        """
        topic = self.broker.topics.get(queue)
        return topic is not None and bool(topic.groups)

    async def subscribe(self, queue: str, group: str | None = None) -> MemorySubscription:
        if self.closed:
            raise BusClosed("the in-memory bus connection is closed")
        topic = self.broker.topic(queue)
        buffer: DeliveryBuffer[MemoryDelivery]
        if group is None:
            buffer = DeliveryBuffer(self.broker.buffer_size, loop=self.broker.loop)
            topic.fanout.append(buffer)
        else:
            buffer = topic.groups.get(group) or topic.groups.setdefault(
                group, DeliveryBuffer(self.broker.buffer_size, loop=self.broker.loop)
            )
            topic.group_members[group] = topic.group_members.get(group, 0) + 1
        topic.refresh()
        sub = MemorySubscription(self, topic, buffer, parse_queue(queue).persistent)
        self.subscriptions.add(sub)
        return sub

    async def listen(self, queue: str, handler: MessageHandler) -> MemoryListener:
        """Push every message on ``queue`` to ``handler``, inside the publisher's call."""
        if self.closed:
            raise BusClosed("the in-memory bus connection is closed")
        topic = self.broker.topic(queue)
        target = _Push(handler)
        topic.fanout.append(target)
        topic.refresh()
        listener = MemoryListener(self, topic, target)
        self.listeners.add(listener)
        return listener

    async def close(self) -> None:
        self.closed = True
        for sub in list(self.subscriptions):
            await sub.close()
        for listener in list(self.listeners):
            await listener.close()


class MemoryOptions(BrokerOptions):
    """The in-memory bus's options, as URL query parameters or ``options``."""

    #: Messages each group's or fan-out subscriber's buffer holds before publishers wait.
    buffer_size: int = pydantic.Field(DEFAULT_BUFFER, ge=1)
    max_message_size: int = pydantic.Field(DEFAULT_MAX_MESSAGE, ge=1)


async def connect(url: str = "memory://", options: Mapping[str, Any] | None = None) -> MemoryBus:
    """Connect to the in-memory broker named by ``url`` (``memory://`` or ``memory://name``).

    Options (:class:`MemoryOptions`) as query parameters or in ``options``; an
    unknown one is a :class:`~toolbus.domain.errors.BrokerOptionError`, as on
    every broker.
    """
    parts = urlsplit(url)
    if parts.scheme != "memory":
        raise BrokerOptionError(
            f"not an in-memory bus URL: {url!r}; use 'memory://' or 'memory://name'"
        )
    settings = parse_broker_options(
        MemoryOptions, parts.query, options, where=f"memory bus URL {url.partition('?')[0]!r}"
    )
    name = (parts.netloc + parts.path).strip("/") or "default"
    broker = broker_for(name, settings.buffer_size)
    return MemoryBus(broker, settings.max_message_size)
