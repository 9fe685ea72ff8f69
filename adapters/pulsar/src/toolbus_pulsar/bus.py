"""The toolbus :class:`~toolbus.ports.Bus` on Apache Pulsar, through pulsar-client.

Mapping (queue names are Pulsar topic names already; see docs/wire-protocol.md):

* a queue is the topic :attr:`QueueName.topic` (a plain name ``x`` is
  ``persistent://public/default/x``, Pulsar's own rule);
* ``subscribe(queue, group=name)`` is a **Shared** subscription called ``name``:
  its consumers compete, and the broker hands an unacked message of a consumer
  that leaves to another one;
* ``subscribe(queue)`` is an **Exclusive** subscription with a unique name
  (``toolbus-<hex>``): every such subscription gets every message. On a
  persistent topic it is deleted (unsubscribed) when closed, so that no backlog
  is kept for a reader that is gone;
* ``ack`` acknowledges and ``nack`` negatively acknowledges (redelivered after
  ``nack_redelivery_delay``) on persistent topics; both are no-ops on
  non-persistent ones, where Pulsar delivers at most once anyway.

Producers are made once per topic and kept until the bus closes; when a
``publish`` returns is :mod:`toolbus_pulsar.publishing`'s business. Nothing here
blocks the event loop (see :mod:`toolbus_pulsar.handoff`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Mapping
from typing import Any

import pulsar

from toolbus._internal.reachability import CHECK_TIMEOUT, refused_by_all
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import BusClosed, MessageTooLarge
from toolbus.ports import MessageHandler
from toolbus_pulsar import clients, handoff
from toolbus_pulsar.errors import (
    UNREACHABLE_RESULTS,
    BrokerUnreachable,
    result_of,
    translate,
    unreachable,
)
from toolbus_pulsar.options import PulsarOptions, parse_options
from toolbus_pulsar.publishing import HOW_TO_RAISE, Sender
from toolbus_pulsar.subscription import PulsarSubscription

log = logging.getLogger("toolbus_pulsar")

#: Looked up (never created or written) by ``connect`` to prove the broker answers.
PROBE_TOPIC = "non-persistent://public/default/toolbus-connection-probe"
FAN_OUT_PREFIX = "toolbus-"


class PulsarBus:
    """A connection to a Pulsar broker (see the module docstring for the mapping)."""

    # The broker's client first and its options second, as NatsBus takes them.
    def __init__(self, client: pulsar.Client, options: PulsarOptions) -> None:
        self.options = options
        self._client = client
        self._url = options.safe_url
        self._senders: dict[str, Sender] = {}
        self._opening: dict[str, asyncio.Task[Sender]] = {}
        self._subscriptions: set[PulsarSubscription] = set()
        self._closed = False
        #: A subscription was closed while the broker could not be reached.
        self._lost = False

    @property
    def max_message_size(self) -> int | None:
        return self.options.max_message_size

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def connected(self) -> bool:
        """False as soon as a consumer or producer has lost its connection to the broker.

        pulsar-client notices a lost connection and reconnects each handle on its
        own, not all at the same moment: one that has noticed is enough to know
        that waiting on the broker (to withdraw, say) would only wait out
        ``operation_timeout``.
        """
        states = [s.connected for s in self._subscriptions]
        states += [bool(sender.producer.is_connected()) for sender in self._senders.values()]
        return all(states)

    # -- publishing ---------------------------------------------------------------

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        if self._closed:
            raise BusClosed(f"the Pulsar bus for {self._url} is closed")
        limit = self.options.max_message_size
        if len(body) > limit:
            raise MessageTooLarge(len(body), limit, HOW_TO_RAISE)
        sender = self._senders.get(queue) or await self._sender(queue)
        await sender.send(body, properties)

    async def _sender(self, queue: str) -> Sender:
        """The producer for ``queue``, created once even when many publish at once."""
        opening = self._opening.get(queue)
        if opening is None:
            opening = asyncio.ensure_future(self._open_sender(queue))
            self._opening[queue] = opening
            opening.add_done_callback(functools.partial(self._opened, queue))
        # Shielded: a cancelled publisher must not abort a creation others wait for.
        return await asyncio.shield(opening)

    def _opened(self, queue: str, task: asyncio.Task[Sender]) -> None:
        self._opening.pop(queue, None)
        if not task.cancelled() and task.exception() is None:
            # Kept even if the bus closed meanwhile: close() waits for creations in
            # progress, so that it closes this producer too.
            self._senders[queue] = task.result()

    async def _open_sender(self, queue: str) -> Sender:
        parsed = parse_queue(queue)
        topic = parsed.topic
        options = self.options
        create = functools.partial(
            self._client.create_producer,
            topic,
            send_timeout_millis=round(options.operation_timeout * 1000),
            max_pending_messages=options.max_pending_messages,
            block_if_queue_full=False,
            batching_enabled=options.batching_delay > 0,
            batching_max_publish_delay_ms=max(1, round(options.batching_delay * 1000)),
        )
        try:
            producer = await handoff.blocking(create, cleanup=_close_quietly)
        except pulsar.PulsarException as exc:
            raise translate(
                result_of(exc),
                f"create a producer for {topic}",
                self._url,
                options.operation_timeout,
            ) from exc
        return Sender(
            producer,
            topic,
            limit=options.max_pending_messages,
            size_limit=options.max_message_size,
            confirm=parsed.persistent or options.confirm_non_persistent,
            describe=functools.partial(translate, url=self._url, timeout=options.operation_timeout),
        )

    # -- subscribing --------------------------------------------------------------

    async def subscribe(self, queue: str, group: str | None = None) -> PulsarSubscription:
        return await self._consume(queue, group, None)

    async def listen(self, queue: str, handler: MessageHandler) -> PulsarSubscription:
        """Push every message on ``queue`` to ``handler`` from the consumer's listener."""
        return await self._consume(queue, None, handler)

    async def _consume(
        self, queue: str, group: str | None, handler: MessageHandler | None
    ) -> PulsarSubscription:
        if self._closed:
            raise BusClosed(f"the Pulsar bus for {self._url} is closed")
        parsed = parse_queue(queue)
        options = self.options
        if group is None:
            name = f"{FAN_OUT_PREFIX}{uuid.uuid4().hex}"
            consumer_type = pulsar.ConsumerType.Exclusive
        else:
            name = group
            consumer_type = pulsar.ConsumerType.Shared
        subscription = PulsarSubscription(
            topic=parsed.topic,
            persistent=parsed.persistent,
            fan_out=group is None,
            url=self._url,
            timeout=options.operation_timeout,
            on_close=self._forget,
            handler=handler,
        )
        create = functools.partial(
            self._client.subscribe,
            parsed.topic,
            name,
            consumer_type=consumer_type,
            message_listener=subscription.on_message,
            receiver_queue_size=options.receiver_queue_size,
            negative_ack_redelivery_delay_ms=round(options.nack_redelivery_delay * 1000),
            initial_position=pulsar.InitialPosition.Latest,
        )
        try:
            # Returns once the broker has registered the consumer: for a
            # non-persistent topic that is the moment it starts to receive.
            consumer = await handoff.blocking(create, cleanup=_close_quietly)
        except pulsar.PulsarException as exc:
            raise translate(
                result_of(exc),
                f"subscribe to {parsed.topic} as {name!r}",
                self._url,
                options.operation_timeout,
            ) from exc
        subscription.attach(consumer)
        if self.closed:  # the property: mypy would take the flag for still False
            # The bus closed while the broker was registering this consumer.
            await subscription.close()
            raise BusClosed(f"the Pulsar bus for {self._url} is closed")
        self._subscriptions.add(subscription)
        return subscription

    # -- closing ------------------------------------------------------------------

    def _forget(self, subscription: PulsarSubscription) -> None:
        self._subscriptions.discard(subscription)
        self._lost = self._lost or subscription.abandoned

    async def close(self) -> None:
        """Close every subscription and producer, then let go of the shared client."""
        if self._closed:
            return
        gone = self._lost or not self.connected
        self._closed = True
        for subscription in list(self._subscriptions):
            await subscription.close()
        if self._opening:
            await asyncio.gather(*self._opening.values(), return_exceptions=True)
        senders = list(self._senders.values())
        self._senders.clear()
        # Each flushes what it still has queued (sends nobody waited for) first.
        await asyncio.gather(*(handoff.blocking(sender.close) for sender in senders))
        await clients.release(self.options, self._client, at_once=gone or self._lost)


def _close_quietly(closable: pulsar.Producer | pulsar.Consumer) -> None:
    """Close a producer or consumer on a worker thread; failing to is only logged."""
    try:
        closable.close()
    except pulsar.PulsarException as exc:
        log.debug("closing %s failed: %s", closable, exc)


async def connect(url: str, options: Mapping[str, Any] | None = None) -> PulsarBus:
    """Connect to the Pulsar broker at ``url`` (``pulsar://host:6650`` or ``pulsar+ssl://``).

    Fails within ``connect_timeout`` seconds (default 5) with
    :class:`~toolbus_pulsar.errors.BrokerUnreachable`, naming the URL, when the
    broker does not answer, and at once when nothing listens there. See
    :mod:`toolbus_pulsar.options` for every option.
    """
    parsed = parse_options(url, options)
    nothing = await refused_by_all(parsed.servers, min(CHECK_TIMEOUT, parsed.connect_timeout))
    if nothing is not None:
        raise BrokerUnreachable(
            f"cannot reach the Pulsar broker at {parsed.safe_url}: {nothing}; check that it "
            "is running and that the URL is right"
        )
    client = clients.acquire(parsed)
    try:
        await _probe(client, parsed)
    except BaseException:
        await clients.release(parsed, client)
        raise
    return PulsarBus(client, parsed)


async def _probe(client: pulsar.Client, options: PulsarOptions) -> None:
    """Make pulsar-client connect now, so that a dead broker is reported here, not later."""
    try:
        async with asyncio.timeout(options.connect_timeout):
            await handoff.blocking(functools.partial(client.get_topic_partitions, PROBE_TOPIC))
    except TimeoutError:
        raise unreachable(options.safe_url, options.connect_timeout) from None
    except pulsar.PulsarException as exc:
        result = result_of(exc)
        if result in UNREACHABLE_RESULTS:
            raise unreachable(options.safe_url, options.connect_timeout, result) from exc
        if result == pulsar.Result.AuthenticationError:
            raise translate(
                result, "authenticate", options.safe_url, options.connect_timeout
            ) from exc
        # Any other answer (not authorized for the probe topic, say) came from a
        # broker that is up: that is all the probe wants to know.
        log.debug("connection probe on %s answered %s", options.safe_url, result.name)
