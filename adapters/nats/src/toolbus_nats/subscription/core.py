"""Non-persistent queues on core NATS: at-most-once, no acknowledgements.

Competing consumers are a NATS *queue group* named after the toolbus group (the
service id), so each request reaches one replica; fan-out subscribers subscribe
plainly and each gets every message. Properties travel as NATS headers.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer
from toolbus.ports import Delivery, MessageHandler

log = logging.getLogger("toolbus.nats")

_EMPTY: Mapping[str, str] = {}


class CoreDelivery:
    """A core NATS message; ``ack``/``nack`` do nothing (nothing would redeliver it)."""

    __slots__ = ("body", "properties")

    redelivered = False
    #: Core NATS keeps nothing, so nothing waits: no broker timestamp to give.
    enqueued_at = None

    def __init__(self, body: bytes, properties: Mapping[str, str]) -> None:
        self.body = body
        self.properties = properties

    async def ack(self) -> None:
        return None

    async def nack(self) -> None:
        return None


async def subscribe_live(
    nc: Client, subject: str, group: str | None, callback: Callable[[Msg], Awaitable[None]]
) -> NatsSubscription:
    """Subscribe ``callback``; returns once the server is known to have the SUB."""
    sub = await nc.subscribe(subject, queue=group or "", cb=callback)
    # A PING/PONG round trip after the SUB proves the server has registered
    # it, so nothing published from now on is missed. nats-py, though, keeps
    # SUB in its write buffer while flush() writes PING straight to the
    # socket: the first PONG can come back before the server has the SUB.
    # By the time it does, the buffer has been written, so the second PING
    # goes out after the SUB and its PONG is the proof.
    await nc.flush()
    await nc.flush()
    return sub


async def unsubscribe_quietly(nc: Client, sub: NatsSubscription | None, subject: str) -> None:
    """Leave ``sub`` if there is one and the connection is still open."""
    if sub is not None and not nc.is_closed:
        try:
            await sub.unsubscribe()
        except Exception:  # the connection is going away anyway
            log.debug("unsubscribing from %s failed", subject, exc_info=True)


async def drain_fenced(nc: Client, sub: NatsSubscription) -> None:
    """UNSUB, prove the server has it, then hand every message it sent before to the callback.

    nats-py's own drain queues its UNSUB in the write buffer but writes the PING
    straight to the socket, so the PONG it waits for can come back before the
    server has the UNSUB; what the server sends a queue-group member in between
    reaches a subscription nats-py has already removed, and is dropped. So the
    UNSUB goes first, fenced by two round trips as in :func:`subscribe_live`;
    drain's own UNSUB is then a no-op on the server, and its wait for the
    callback to finish what arrived is what hands those messages out.
    """
    # nats-py has no public "UNSUB but keep delivering"; its drain uses this one.
    await nc._send_unsubscribe(sub._id)
    await nc.flush()
    await nc.flush()
    await sub.drain()  # type: ignore[no-untyped-call]  # nats-py leaves it untyped


def _weigh(delivery: Delivery) -> int:
    return len(delivery.body)


class CoreSubscription:
    """A subscription on a core NATS subject, optionally in a queue group."""

    def __init__(
        self,
        nc: Client,
        subject: str,
        group: str | None,
        on_close: Callable[[CoreSubscription], None],
        *,
        buffer_messages: int,
        buffer_bytes: int,
    ) -> None:
        self._nc = nc
        self.subject = subject
        self.group = group
        self._buffer: DeliveryBuffer[Delivery] = DeliveryBuffer(
            buffer_messages, buffer_bytes, _weigh
        )
        self._on_close = on_close
        self._sub: NatsSubscription | None = None

    async def start(self) -> None:
        """Subscribe and make sure the server knows before returning."""
        self._sub = await subscribe_live(self._nc, self.subject, self.group, self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        buffer = self._buffer
        if buffer.offer(CoreDelivery(msg.data, msg.headers or _EMPTY)):
            await buffer.wait_for_space()

    def stand_by(self, take: Callable[[Delivery], bool]) -> None:
        """Offer ``take`` each message inside nats-py's callback (see StandbySubscription)."""
        self._buffer.stand_by(take)

    def stand_down(self, take: Callable[[Delivery], bool]) -> None:
        self._buffer.stand_down(take)

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        try:
            return await self._buffer.get()
        except BufferClosed:
            raise StopAsyncIteration from None

    def fail(self, error: BaseException) -> None:
        """The connection is gone for good: readers get ``error``."""
        self._buffer.close(error)

    async def stop_intake(self) -> None:
        """UNSUB (the queue group's other members get what comes next), then hand out
        what was sent here before the server had it."""
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed and self._nc.is_connected:
            try:
                await drain_fenced(self._nc, sub)
            except Exception:
                log.debug("draining %s failed", self.subject, exc_info=True)
        else:
            await unsubscribe_quietly(self._nc, sub, self.subject)
        self._buffer.finish()

    async def close(self) -> None:
        if self._buffer.closed and self._sub is None:
            return
        self._buffer.close()
        self._on_close(self)
        sub, self._sub = self._sub, None
        await unsubscribe_quietly(self._nc, sub, self.subject)


class CoreListener:
    """Pushes a core NATS subject's messages to a handler from nats-py's callback.

    nats-py calls the callback from one task per subscription, in order; the
    handler runs right there, so no buffer or reader task stands in between.
    """

    def __init__(
        self,
        nc: Client,
        subject: str,
        handler: MessageHandler,
        on_close: Callable[[CoreListener], None],
    ) -> None:
        self._nc = nc
        self.subject = subject
        self._handler = handler
        self._on_close = on_close
        self._sub: NatsSubscription | None = None
        self._ended = False

    async def start(self) -> None:
        self._sub = await subscribe_live(self._nc, self.subject, None, self._on_message)

    async def _on_message(self, msg: Msg) -> None:
        try:
            self._handler.on_message(CoreDelivery(msg.data, msg.headers or _EMPTY))
        except Exception:  # one bad message must not end the subscription
            log.exception("a listener's handler failed on %s; message dropped", self.subject)

    def fail(self, error: BaseException) -> None:
        """The connection is gone for good."""
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        if not self._ended:
            self._ended = True
            self._handler.on_end(error)

    async def close(self) -> None:
        if self._ended and self._sub is None:
            return
        self._on_close(self)
        sub, self._sub = self._sub, None
        await unsubscribe_quietly(self._nc, sub, self.subject)
        self._end(None)
