"""A Pulsar consumer as a toolbus :class:`~toolbus.ports.Subscription`.

pulsar-client hands each message to a listener on its own thread, which passes
it to the event loop. There it goes into the core's
:class:`~toolbus._internal.delivery_buffer.DeliveryBuffer`, shared by every adapter, which
wakes a waiting reader. So several tasks may read one subscription at once (the
service host runs a pool of workers on it), and every read is cancel-safe.

Flow control stays pulsar-client's: when messages queue up here beyond a few
(no reader is keeping up: the buffer is full), the listener is paused,
pulsar-client's receiver queue fills, and the broker stops sending. Reading the
queue down resumes the listener.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Mapping

import pulsar

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer
from toolbus.domain.errors import BusClosed
from toolbus.ports import Delivery, MessageHandler
from toolbus_pulsar.errors import result_of, translate
from toolbus_pulsar.handoff import blocking, handoff

log = logging.getLogger("toolbus_pulsar")

#: Messages queued here, beyond pulsar-client's receiver queue, before the listener pauses.
HIGH_WATER = 64
#: ... and how few must be left for it to resume.
LOW_WATER = 16


class PulsarDelivery:
    """One received message; ``ack``/``nack`` act only on persistent topics."""

    __slots__ = ("_body", "_message", "_properties", "_subscription")

    def __init__(self, subscription: PulsarSubscription, message: pulsar.Message) -> None:
        self._subscription = subscription
        self._message = message
        self._body: bytes | None = None
        self._properties: Mapping[str, str] | None = None

    # Body and properties are copied out of the C++ message only when asked for:
    # a client reads the properties of every answer on a shared response queue,
    # but the body only of its own.

    @property
    def body(self) -> bytes:
        body = self._body
        if body is None:
            body = self._body = self._message.data()
        return body

    @property
    def properties(self) -> Mapping[str, str]:
        properties = self._properties
        if properties is None:
            properties = self._properties = self._message.properties()
        return properties

    @property
    def redelivered(self) -> bool:
        return bool(self._message.redelivery_count() > 0)

    @property
    def enqueued_at(self) -> float | None:
        """The message's publish time (set by the publishing client, kept by the broker)."""
        milliseconds = self._message.publish_timestamp()
        return milliseconds / 1000 if milliseconds > 0 else None

    async def ack(self) -> None:
        if self._subscription.persistent:
            self._subscription.settle(self._message, acknowledge=True)

    async def nack(self) -> None:
        if self._subscription.persistent:
            self._subscription.settle(self._message, acknowledge=False)


class PulsarSubscription:
    """An open Pulsar consumer. Iterate (from one task or several) for deliveries.

    Made before the consumer exists, because its :meth:`on_message` must be given
    to ``subscribe``; :meth:`attach` completes it.
    """

    def __init__(
        self,
        *,
        topic: str,
        persistent: bool,
        fan_out: bool,
        url: str,
        timeout: float,
        on_close: Callable[[PulsarSubscription], None] | None = None,
        handler: MessageHandler | None = None,
    ) -> None:
        self.topic = topic
        #: Set for a listener (PushBus.listen): messages go to it, not to readers.
        self.handler = handler
        self.persistent = persistent
        #: A fan-out subscription is ours alone: it is deleted when closed.
        self.fan_out = fan_out
        self._url = url
        self._timeout = timeout
        self._on_close = on_close
        self._loop = asyncio.get_running_loop()
        self._handoff = handoff(self._loop)
        self._consumer: pulsar.Consumer | None = None
        self._buffer: DeliveryBuffer[pulsar.Message] = DeliveryBuffer(HIGH_WATER, loop=self._loop)
        self._paused = False
        #: stop_intake: nothing more is taken from pulsar-client.
        self._intake_stopped = False
        self.closed = False
        self.abandoned = False

    def attach(self, consumer: pulsar.Consumer) -> None:
        self._consumer = consumer
        if self._buffer.full():
            self._pause()

    @property
    def connected(self) -> bool:
        """Whether the consumer has a live connection to its broker (True before attach)."""
        return self._consumer is None or bool(self._consumer.is_connected())

    @property
    def queued(self) -> int:
        """Messages taken from pulsar-client and waiting here for a reader."""
        return len(self._buffer)

    @property
    def name(self) -> str:
        """The Pulsar subscription name."""
        assert self._consumer is not None
        name: str = self._consumer.subscription_name()
        return name

    # -- arrival (listener thread, then the loop) ----------------------------------

    def on_message(self, _consumer: pulsar.Consumer, message: pulsar.Message) -> None:
        """pulsar-client's message listener: on its thread, hand over to the loop."""
        # Should the loop be closed, the message stays unacked: the broker
        # redelivers it (persistent) once this consumer is gone.
        self._handoff.call(self._arrived, message)

    def _arrived(self, message: pulsar.Message) -> None:
        if self.closed or self._intake_stopped:
            return  # the broker gets it back with the consumer (see close)
        if self.handler is not None:
            self._push(message)
            return
        if self._buffer.offer(message) and not self._paused:
            self._pause()

    def _push(self, message: pulsar.Message) -> None:
        """A listener's message: straight to its handler, then acked."""
        assert self.handler is not None
        try:
            self.handler.on_message(PulsarDelivery(self, message))
        except Exception:  # one bad message must not end the subscription
            log.exception("a listener's handler failed on %s; message dropped", self.topic)
        if self.persistent:
            try:
                self.settle(message, acknowledge=True)
            except BusClosed:
                log.debug("could not ack on %s", self.topic, exc_info=True)

    def _pause(self) -> None:
        consumer = self._consumer
        if consumer is not None:  # else attach() pauses
            self._paused = True
            consumer.pause_message_listener()  # sets a flag; does not wait

    # -- reading --------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        buffer = self._buffer
        try:
            message = await buffer.get()
        except BufferClosed:
            raise StopAsyncIteration from None
        if self._paused and len(buffer) <= LOW_WATER and not self._intake_stopped:
            self._paused = False
            assert self._consumer is not None
            self._consumer.resume_message_listener()  # schedules; does not wait
        return PulsarDelivery(self, message)

    # -- settling ---------------------------------------------------------------------

    def settle(self, message: pulsar.Message, *, acknowledge: bool) -> None:
        """Acknowledge, or negatively acknowledge, one message of a persistent topic.

        Called on the loop: neither call waits for the broker. Acknowledgements are
        grouped and sent by pulsar-client in the background; a negative one starts
        the redelivery timer (``nack_redelivery_delay``).
        """
        consumer = self._consumer
        action = "acknowledge a message" if acknowledge else "negatively acknowledge a message"
        if self.closed or consumer is None:
            raise BusClosed(f"could not {action}: the subscription to {self.topic} is closed")
        try:
            if acknowledge:
                consumer.acknowledge(message)
            else:
                consumer.negative_acknowledge(message)
        except pulsar.PulsarException as exc:
            raise translate(
                result_of(exc), f"{action} on {self.topic}", self._url, self._timeout
            ) from exc

    # -- closing ------------------------------------------------------------------------

    async def stop_intake(self) -> None:
        """Take nothing more from pulsar-client; hand out what it has passed on.

        The consumer stays subscribed until :meth:`close`: Pulsar has no way to
        stop dispatching to it but to leave, and messages in pulsar-client's
        receiver queue then go back to the broker (persistent topics) or are
        dropped with the consumer (non-persistent ones: see docs/adapters/pulsar.md).
        """
        self._intake_stopped = True
        consumer = self._consumer
        if consumer is not None and not self._paused:
            self._paused = True
            consumer.pause_message_listener()
        self._buffer.finish()

    async def close(self) -> None:
        """Leave. Unacked messages of a persistent group go to its other members."""
        if self.closed:
            return
        self.closed = True
        #: Left without telling the broker, which could not be reached.
        self.abandoned = not self.connected
        if self._on_close is not None:
            self._on_close(self)
        # Readers still waiting end their iteration. Messages queued here but not
        # read are unacked, so they go back to the broker with the consumer.
        self._buffer.close()
        self._buffer.take_all()
        if self.handler is not None:
            self.handler.on_end(None)
        consumer = self._consumer
        if consumer is None:
            return
        if self.abandoned:
            # The broker dropped this consumer with the connection; telling it would
            # wait out operation_timeout. The client's shutdown releases the handle.
            log.debug("not closing the subscription to %s: not connected", self.topic)
            return
        # Nobody else reads a fan-out subscription: on a persistent topic, delete it
        # rather than let the broker keep a backlog for it forever.
        leave = consumer.unsubscribe if self.fan_out and self.persistent else consumer.close
        try:
            await blocking(leave)
        except pulsar.PulsarException as exc:
            if result_of(exc) != pulsar.Result.AlreadyClosed:
                log.warning("closing the subscription to %s failed: %s", self.topic, exc)
