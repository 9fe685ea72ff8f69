"""Ports: what the application layer needs from the outside world.

Adapters (the in-memory bus, NATS, Pulsar, Kafka) implement :class:`Bus`. The
application layer depends on these protocols only, never on an adapter.

Delivery rules every Bus must keep (the conformance suite in
``toolbus.testing.conformance`` checks them against each adapter):

* ``subscribe(queue, group=name)`` makes *competing consumers*: each message is
  delivered to one member of the group (replicas of one service share the work).
* ``subscribe(queue, group=None)`` *fans out*: every such subscription gets
  every message published after it was made.
* A subscription is live before ``subscribe`` returns: nothing published after
  that can be missed by it.
* On a ``persistent://`` queue delivery is at-least-once: a message not acked
  (nacked, or its consumer died) is delivered again. On ``non-persistent://``
  it is at-most-once and ``ack``/``nack`` are no-ops.
* Bodies of several MB work; ``max_message_size`` says where the limit is.
* Iterating a subscription is safe from several tasks at once (the service host
  runs a pool of workers on one subscription), and cancel-safe: cancelling a
  pending read never loses a message.

A bus may also *push* (:class:`PushBus`): ``listen(queue, handler)`` is a
fan-out subscription whose messages go straight to ``handler.on_message``, with
no task reading it. A client waiting for answers then saves an event-loop hop
per answer. The rules are the fan-out ones above, plus: messages reach the
handler one at a time, in order, on the event loop; each is acked once the
handler returns, whatever it did; when the bus can no longer deliver (closed,
connection lost for good) ``on_end`` is called once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Delivery(Protocol):
    """One message handed to a subscriber."""

    @property
    def body(self) -> bytes: ...

    @property
    def properties(self) -> Mapping[str, str]: ...

    @property
    def redelivered(self) -> bool:
        """True when this message was delivered before (to this or another consumer)."""
        ...

    async def ack(self) -> None:
        """Done with it: never deliver it again."""
        ...

    async def nack(self) -> None:
        """Could not handle it: deliver it again (persistent queues only)."""
        ...


class Subscription(Protocol):
    """An open subscription. Iterate it for deliveries; close it to leave."""

    def __aiter__(self) -> AsyncIterator[Delivery]: ...

    async def close(self) -> None:
        """Stop receiving. Unacked deliveries of a persistent queue go back to the queue."""
        ...


class Bus(Protocol):
    """A connection to a message broker."""

    @property
    def max_message_size(self) -> int | None:
        """The largest body the broker accepts, when known."""
        ...

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        """Send one message. Returns once the broker has taken it (or backpressure eased)."""
        ...

    async def subscribe(self, queue: str, group: str | None = None) -> Subscription:
        """Subscribe; live before it returns. ``group`` names competing consumers."""
        ...

    async def close(self) -> None:
        """Close every subscription and the connection."""
        ...


class MessageHandler(Protocol):
    """Receives the messages a :class:`PushBus` listener pushes."""

    def on_message(self, delivery: Delivery) -> None:
        """One message. Must not block; an exception is logged and the message dropped."""
        ...

    def on_end(self, error: BaseException | None) -> None:
        """No more messages will come: closed (``None``) or failed (``error``)."""
        ...


class Listener(Protocol):
    """A running :meth:`PushBus.listen`; close it to stop."""

    async def close(self) -> None: ...


@runtime_checkable
class PushBus(Protocol):
    """A :class:`Bus` that can also push a fan-out subscription's messages to a handler."""

    async def listen(self, queue: str, handler: MessageHandler) -> Listener | None:
        """Push every message on ``queue`` to ``handler``; live before it returns.

        ``None`` when this bus cannot push on that queue: subscribe instead.
        """
        ...


@runtime_checkable
class ConsumerAwareBus(Protocol):
    """A :class:`Bus` that knows at once whether anyone would take a message now.

    Only a broker that holds all its state in this process can know (the
    in-memory bus); a networked broker cannot, and does not implement this.
    """

    def has_consumers(self, queue: str) -> bool:
        """False when a message published on ``queue`` now would reach no competing
        consumer and be dropped: no one can answer a request sent there."""
        ...


@runtime_checkable
class ConnectionAwareBus(Protocol):
    """A :class:`Bus` that knows whether its broker can be reached right now."""

    @property
    def connected(self) -> bool:
        """False while the connection is known to be lost (the bus is reconnecting)."""
        ...


def broker_known_gone(bus: Bus) -> bool:
    """Whether ``bus`` knows its broker cannot be reached now (so nothing should wait on it).

    A bus that cannot tell is taken to be connected.
    """
    return isinstance(bus, ConnectionAwareBus) and not bus.connected


class Clock(Protocol):
    """Wall-clock time in Unix seconds. Injected so that TTLs and deadlines are testable."""

    def __call__(self) -> float: ...


BusFactory = Callable[[str, Mapping[str, Any]], Awaitable[Bus]]
"""``await factory(url, options)`` connects to the broker at ``url``."""
