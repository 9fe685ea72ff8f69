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
* ``stop_intake()`` hands over: the broker sends the subscription nothing more,
  what it already has is still read, then iteration ends. A replica that stops
  this way loses nothing even on a ``non-persistent://`` queue.

A bus may also *push* (:class:`PushBus`): ``listen(queue, handler)`` is a
fan-out subscription whose messages go straight to ``handler.on_message``, with
no task reading it. A client waiting for answers then saves an event-loop hop
per answer. The rules are the fan-out ones above, plus: messages reach the
handler one at a time, in order, on the event loop; each is acked once the
handler returns, whatever it did; when the bus can no longer deliver (closed,
connection lost for good) ``on_end`` is called once.

A subscription may let a reader *stand by* (:class:`StandbySubscription`):
take each delivery inside the call that brought it, while none is held for
the other readers.

A bus may also *advertise* (:class:`AdvertisingBus`): list a served tool
service in its broker's own service discovery, for operators' tools.

State that must outlive a process, or be shared by the replicas of one, goes
through a :class:`StateStore`: a key-value store (in memory, NATS JetStream
key-value buckets, Redis) with get, put with a time to live, add-if-absent,
compare-and-set and delete, and :class:`WatchableStateStore` where the engine
can tell a waiter about changes. The conformance suite in
``toolbus.testing.state_conformance`` holds every store to the rules written on
these protocols.

A call policy that sees each call's arguments is a :class:`PolicyEngine`
(Cedar, with ``toolbus[policy]``), found by name through the
``toolbus.policy_engines`` entry points.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from toolbus.domain.access.policy import PolicyDecision, PolicyRequest
from toolbus.domain.calls.listing import ServedCounts, ServiceListing
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import Problem


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

    @property
    def enqueued_at(self) -> float | None:
        """When the message was published, by the broker's timestamp (Unix seconds).

        The broker's own clock where it stamps messages (JetStream, the
        in-memory bus, Kafka topics with ``LogAppendTime``); the publishing
        client's where the broker keeps that instead (Kafka's ``CreateTime``,
        Pulsar's publish time). ``None`` where the broker keeps none. A service
        host checks call tokens as of this moment on at-least-once queues,
        where a call may wait for its service.
        """
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

    async def stop_intake(self) -> None:
        """Take no more messages: those already here can still be read, then iteration ends.

        For a consumer that is leaving (a replica shutting down): what the broker
        has not handed over yet goes to the other members of its group, and what
        it has is read, not dropped, so that even an at-most-once queue loses
        nothing to a rollout. Returns once the broker will send this subscription
        nothing more; :meth:`close` still follows.
        """
        ...

    async def close(self) -> None:
        """Stop receiving. Unacked deliveries of a persistent queue go back to the queue."""
        ...


@runtime_checkable
class StandbySubscription(Protocol):
    """A :class:`Subscription` whose deliveries a reader can take the moment they arrive.

    A reader standing by is offered each delivery inside the call that brought
    it (the in-memory publisher's, the broker client's callback), while the
    subscription holds none for its other readers; one it declines is held for
    them as usual, so no delivery waits while a reader could take it and order
    is kept. A service host answers that way on Python 3.12 and later, where a
    task's first step can run at once (eager tasks): a tool that does not wait
    is answered before the call that brought its request returns.
    """

    def stand_by(self, take: Callable[[Delivery], bool]) -> None:
        """Offer ``take`` each delivery as it arrives; it returns True when it took it.

        ``take`` runs inside the broker's call: it must neither raise nor wait.
        A delivery taken is the reader's as if it had been read (ack it).
        """
        ...

    def stand_down(self, take: Callable[[Delivery], bool]) -> None:
        """Offer ``take`` nothing more."""
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


class Advertisement(Protocol):
    """A service listed by :meth:`AdvertisingBus.advertise`; close it to withdraw it."""

    @property
    def where(self) -> str:
        """Where operators find it, for start-up lines (``NATS micro service joke-service``)."""
        ...

    async def close(self) -> None: ...


@runtime_checkable
class AdvertisingBus(Protocol):
    """A :class:`Bus` whose broker has a service-discovery protocol of its own.

    The NATS adapter lists each served tool service as a NATS micro service.
    Discovery is for operators and their tools; agents find tools through
    toolbus's own announcements, whatever the broker.
    """

    async def advertise(
        self, listing: ServiceListing, counts: Callable[[], ServedCounts]
    ) -> Advertisement | None:
        """List ``listing`` until the returned advertisement is closed.

        ``counts`` is called whenever the broker's tools ask for statistics.
        ``None`` when this bus cannot list that service.
        """
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


# -- state stores ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StateEntry:
    """A value as a :class:`StateStore` holds it, with the version that wrote it."""

    value: bytes
    #: Changes on every write of the key; compare versions for equality only.
    version: int


class StateStore(Protocol):
    """A connection to a key-value store shared by the processes that use it.

    Every key lives in a *namespace* (``gateway-sessions``, ``replay-guard``:
    a lower-case letter, then lower-case letters, digits and ``-``, at most 64
    characters), so that uses of one store never meet. A key is any non-empty
    text; each store maps it onto what its engine allows, one-to-one and the
    same way in every process. Values are bytes: callers serialise.

    ``ttl`` is seconds the value lives for, counted from the write; ``None``
    keeps it until it is deleted. Each write sets the key's time to live anew
    (a write without ``ttl`` makes the key permanent). A store may round a TTL
    up to its engine's resolution (NATS: whole seconds), never down.

    Conditional writes are atomic across every connection to the store: of
    any number of :meth:`create` calls for one key, one succeeds; an
    :meth:`update` or a conditional :meth:`delete` succeeds only while the key
    still holds the version it names.

    A store that cannot reach its engine raises
    :class:`~toolbus.domain.errors.StateStoreUnavailable` (after its timeout),
    and works again, on the same connection, once the engine is back.
    """

    @property
    def max_value_size(self) -> int | None:
        """The largest value the store accepts, in bytes, when known."""
        ...

    async def get(self, namespace: str, key: str) -> StateEntry | None:
        """The key's value and version; ``None`` when it is absent (or expired)."""
        ...

    async def put(self, namespace: str, key: str, value: bytes, *, ttl: float | None = None) -> int:
        """Write the value whatever the key holds; returns the new version."""
        ...

    async def create(
        self, namespace: str, key: str, value: bytes, *, ttl: float | None = None
    ) -> int | None:
        """Write the value only if the key is absent: the new version, or ``None`` if present."""
        ...

    async def update(
        self, namespace: str, key: str, value: bytes, *, version: int, ttl: float | None = None
    ) -> int | None:
        """Write the value only if the key holds ``version``: the new version, or ``None``."""
        ...

    async def delete(self, namespace: str, key: str, *, version: int | None = None) -> bool:
        """Remove the key. With ``version``, only while it holds that version.

        ``False`` only when ``version`` was given and the key did not hold it
        (it was changed, deleted or never there); deleting an absent key
        without a version is ``True``.
        """
        ...

    async def close(self) -> None:
        """Close the connection (and every watch opened on it)."""
        ...


@runtime_checkable
class WatchableStateStore(StateStore, Protocol):
    """A :class:`StateStore` that can tell a waiter when a key changes."""

    def watch(
        self, namespace: str, key: str
    ) -> AbstractAsyncContextManager[AsyncIterator[StateEntry | None]]:
        """``async with store.watch(ns, key) as changes``: the key's states as they come.

        The first state is the key's current one (``None``: absent), so that
        nothing written between a read and the watch is missed; the watch is
        live when the ``async with`` block starts. Each later state is a write
        (:class:`StateEntry`) or a deletion (``None``) made through any
        connection to the store. States come in order; a watcher that falls
        behind may skip states in between, but always gets the latest. Expiry
        of a TTL is not reported: a waiter keeps its own deadline. A watch
        outlives an engine that goes away and comes back, and then reports
        the state the key has.
        """
        ...


StateStoreFactory = Callable[[str, Mapping[str, Any]], Awaitable[StateStore]]
"""``await factory(url, options)`` connects to the state store at ``url``."""


class PolicyEngine(Protocol):
    """Decides on each call: permit, forbid, or ask a person first.

    An engine is loaded from the policy files the operator names, with what it
    knows of the users (their attributes), and follows changes to the files
    itself: a change that is valid replaces the policies between two calls, so
    no call is dropped; one that is not is logged, and the policies in force
    stay. Decisions are made on the configuration each call uses (a live one
    changes), and must be quick: :meth:`decide` runs on the event loop, before
    every call, so it does not block on I/O.
    """

    def check(self, registry: Registry) -> list[Problem]:
        """What is wrong with the policies on ``registry`` (none: an empty list).

        Each problem names the file and line, and how to fix it. A door checks
        at start, and refuses to start on a problem.
        """
        ...

    def decide(self, registry: Registry, request: PolicyRequest) -> PolicyDecision:
        """The decision on one call. A policy that cannot be evaluated forbids the call."""
        ...

    def teams(self) -> frozenset[str]:
        """The approver teams the policies name (checked against ``[approvals.teams]``)."""
        ...

    def describe(self, registry: Registry) -> str:
        """What policies can refer to on ``registry``, in the engine's terms (Cedar: its
        schema), for the operator writing them (``toolbus policy schema``)."""
        ...

    @property
    def policy_count(self) -> int:
        """How many policies are in force."""
        ...

    def close(self) -> None:
        """Stop following the files."""
        ...


#: ``load(files, users, options)``: an engine on ``files``, knowing ``users``' attributes.
PolicyEngineFactory = Callable[
    [Sequence[Path], Mapping[str, Mapping[str, Any]], Mapping[str, Any]], PolicyEngine
]
