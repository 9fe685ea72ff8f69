"""Reading: a subscription per group seat or fan-out subscriber, deliveries, and listeners.

Competing consumers share one buffer per group; fan-out subscribers get a buffer
each. On ``persistent://`` queues every delivery stays *unacked* until ``ack``;
``nack`` or closing the subscription puts it back at the front of its buffer,
marked redelivered. Non-persistent queues forget a message once handed out.
Readers wait on the core's ``toolbus._internal.delivery_buffer``, as every
adapter's do. A listener (:class:`~toolbus.ports.PushBus`) gets each message
inside the publisher's call instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping

from toolbus._internal.delivery_buffer import DeliveryBuffer
from toolbus.ports import Delivery, MessageHandler

log = logging.getLogger("toolbus.memory")


class _Closed(Exception):
    """Wakes a consumer whose subscription was closed."""


class Push:
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
    """A running :meth:`~toolbus.memory.bus.MemoryBus.listen`."""

    def __init__(self, owner: set[MemoryListener], topic: Topic, target: Push) -> None:
        #: The bus's listeners, which this one leaves when closed.
        self.owner = owner
        self.topic = topic
        self.target = target
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.owner.discard(self)
        self.topic.fanout.remove(self.target)
        self.topic.refresh()
        self.target.handler.on_end(None)


class MemoryDelivery:
    """A message as one consumer sees it."""

    __slots__ = ("_consumer", "_settled", "body", "enqueued_at", "properties", "redelivered")

    def __init__(
        self, body: bytes, properties: Mapping[str, str], redelivered: bool, enqueued_at: float
    ) -> None:
        # Plain attributes rather than read-only properties: read on every call.
        self.body = body
        self.properties = properties
        self.redelivered = redelivered
        #: When this broker took the message (its clock, Unix seconds).
        self.enqueued_at = enqueued_at
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
        return MemoryDelivery(self.body, self.properties, True, self.enqueued_at)


class MemorySubscription:
    """One subscription: a fan-out buffer of its own, or a seat in a group."""

    def __init__(
        self,
        owner: set[MemorySubscription],
        topic: Topic,
        buffer: DeliveryBuffer[MemoryDelivery],
        persistent: bool,
    ) -> None:
        #: The bus's subscriptions, which this one leaves when closed.
        self.owner = owner
        self.topic = topic
        self.buffer = buffer
        self.persistent = persistent
        self.unacked: set[MemoryDelivery] = set()
        # Pending reads: several tasks may read one subscription at once (a worker pool).
        self.waiting: set[asyncio.Future[None]] = set()
        self.closed = False
        #: Left the topic (stop_intake or close): nothing more comes to it.
        self.left = False
        #: A group seat that stopped intake reads nothing more: the group's buffer
        #: is the group's, and its other members read what is in it.
        self.ended = False
        #: What stands by in the buffer for each reader standing by (see stand_by).
        self._standing_by: dict[Callable[[Delivery], bool], Callable[[MemoryDelivery], bool]] = {}

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        buffer = self.buffer
        while True:
            if self.closed or self.ended:
                raise StopAsyncIteration
            delivery = buffer.take()
            if delivery is not None:
                break
            if buffer.closed:  # a fan-out buffer that finished
                raise StopAsyncIteration
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
            if self.closed or self.ended:
                buffer.pass_wake()  # type: ignore[unreachable]  # close() ran meanwhile
                raise StopAsyncIteration
            buffer.woke()
        if self.persistent:
            delivery._consumer = self
            self.unacked.add(delivery)
        return delivery

    def stand_by(self, take: Callable[[Delivery], bool]) -> None:
        """Offer ``take`` each message inside the publisher's call (see StandbySubscription)."""
        if not self.persistent:
            stand_in: Callable[[MemoryDelivery], bool] = take
        else:

            def stand_in(delivery: MemoryDelivery) -> bool:
                # Held as unacked before ``take`` runs: it may ack at once.
                delivery._consumer = self
                self.unacked.add(delivery)
                if take(delivery):
                    return True
                delivery._consumer = None
                self.unacked.discard(delivery)
                return False

        self._standing_by[take] = stand_in
        self.buffer.stand_by(stand_in)

    def stand_down(self, take: Callable[[Delivery], bool]) -> None:
        stand_in = self._standing_by.pop(take, None)
        if stand_in is not None:
            self.buffer.stand_down(stand_in)

    def _stand_all_down(self) -> None:
        for stand_in in self._standing_by.values():
            self.buffer.stand_down(stand_in)
        self._standing_by.clear()

    async def stop_intake(self) -> None:
        if self.left:
            return
        self.left = True
        self._stand_all_down()
        if self.topic.leave(self):
            self.ended = True
            self._end_reads()
        else:
            self.buffer.finish()

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.owner.discard(self)
        self._stand_all_down()
        if not self.left:
            self.left = True
            self.topic.leave(self)
        # A consumer that goes away without acking gives its messages back.
        for delivery in self.unacked:
            delivery._settled = True
            self.buffer.push_front(delivery.again())
        self.unacked.clear()
        self._end_reads()

    def _end_reads(self) -> None:
        # End our own pending reads; one already woken passes its wake on to
        # another consumer when ``__anext__`` sees the subscription closed.
        for waiting in list(self.waiting):
            if not waiting.done():
                waiting.set_exception(_Closed())


class Topic:
    """Where a queue's messages go: a buffer per group, and each fan-out subscriber's."""

    __slots__ = ("fanout", "group_members", "groups", "targets")

    def __init__(self) -> None:
        self.groups: dict[str, DeliveryBuffer[MemoryDelivery]] = {}
        self.group_members: dict[str, int] = {}
        self.fanout: list[DeliveryBuffer[MemoryDelivery] | Push] = []
        #: Every buffer a message goes to: one per group, one per fan-out subscriber.
        self.targets: tuple[DeliveryBuffer[MemoryDelivery] | Push, ...] = ()

    def refresh(self) -> None:
        self.targets = (*self.groups.values(), *self.fanout)

    def leave(self, sub: MemorySubscription) -> bool:
        """Take ``sub`` off the topic; whether it was a group seat (its buffer shared)."""
        for name, buffer in self.groups.items():
            if buffer is sub.buffer:
                self.group_members[name] -= 1
                return True
        if sub.buffer in self.fanout:
            self.fanout.remove(sub.buffer)
            self.refresh()
        return False
