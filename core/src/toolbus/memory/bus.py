"""An in-process message broker with the delivery rules of a real one, and connections to it.

A :class:`MemoryBroker` holds the queues (one per name, on one event loop); a
:class:`MemoryBus` is a connection to it, as a client's connection to a broker.
Buffers are bounded: a publisher waits while any target buffer is full
(backpressure). Messages published when nobody subscribes are dropped, as on
the brokers. Reading is :mod:`~toolbus.memory.subscription`'s business.

The hot path is plain ``asyncio`` futures and deques: no memory streams, no
tasks per message. Everything runs on one event loop; brokers are per loop.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Mapping
from typing import Any

from toolbus._internal.delivery_buffer import DeliveryBuffer
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus.memory.options import DEFAULT_BUFFER, DEFAULT_MAX_MESSAGE, parse_options
from toolbus.memory.subscription import (
    MemoryDelivery,
    MemoryListener,
    MemorySubscription,
    Push,
    Topic,
)
from toolbus.ports import MessageHandler

_EMPTY: Mapping[str, str] = {}


class MemoryBroker:
    """The shared state behind every :class:`MemoryBus` of one name on one event loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, buffer_size: int = DEFAULT_BUFFER) -> None:
        self.loop = loop
        self.buffer_size = buffer_size
        self.topics: dict[str, Topic] = {}

    def topic(self, queue: str) -> Topic:
        topic = self.topics.get(queue)
        if topic is None:
            parse_queue(queue)  # reject names no real broker could carry
            topic = self.topics[queue] = Topic()
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
        enqueued_at = time.time()
        for buffer in topic.targets:
            if len(buffer.items) < buffer.limit:
                # No await: room to spare.
                buffer.offer(MemoryDelivery(body, props, False, enqueued_at))
            else:
                await buffer.put(MemoryDelivery(body, props, False, enqueued_at))

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
        sub = MemorySubscription(self.subscriptions, topic, buffer, parse_queue(queue).persistent)
        self.subscriptions.add(sub)
        return sub

    async def listen(self, queue: str, handler: MessageHandler) -> MemoryListener:
        """Push every message on ``queue`` to ``handler``, inside the publisher's call."""
        if self.closed:
            raise BusClosed("the in-memory bus connection is closed")
        topic = self.broker.topic(queue)
        target = Push(handler)
        topic.fanout.append(target)
        topic.refresh()
        listener = MemoryListener(self.listeners, topic, target)
        self.listeners.add(listener)
        return listener

    async def close(self) -> None:
        self.closed = True
        for sub in list(self.subscriptions):
            await sub.close()
        for listener in list(self.listeners):
            await listener.close()


async def connect(url: str = "memory://", options: Mapping[str, Any] | None = None) -> MemoryBus:
    """Connect to the in-memory broker named by ``url`` (``memory://`` or ``memory://name``).

    Options (:class:`~toolbus.memory.options.MemoryOptions`) as query parameters
    or in ``options``; an unknown one is a
    :class:`~toolbus.domain.errors.BrokerOptionError`, as on every broker.
    """
    settings = parse_options(url, options)
    return MemoryBus(broker_for(settings.name, settings.buffer_size), settings.max_message_size)
