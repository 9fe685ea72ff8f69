"""Persistent queues on JetStream: at-least-once with explicit acks and dead letters.

Layout (names from :mod:`toolbus_nats.naming`):

* One stream per queue subject, made as :mod:`toolbus_nats.provisioning` says.
* A group (``subscribe(queue, group=...)``) is a durable **pull** consumer named
  after the group and shared by its members (the replicas of a service):
  explicit ack, redelivery after ``ack_wait``, starting at messages published
  after it was first made. A fan-out subscription (``group=None``) is an
  ephemeral pull consumer of its own, deleted when the subscription closes
  (or by the server, ``fanout_inactive_threshold`` after its process died).
* Each subscription keeps one pull request of up to ``pull_batch`` messages
  open and tops it up as messages are used, so a waiting message costs no
  extra round trip. While a subscriber holds a delivery it tells JetStream the
  work is in progress, so a long tool call is not redelivered to another
  replica while its own replica is alive; a replica that dies stops doing so,
  and its messages go to the others after ``ack_wait``.
* A message delivered ``max_deliveries`` times without an ack is not handed
  out again: on its next delivery it is republished to ``<subject>.dlq`` (its
  own stream, limits retention, kept ``dead_letter_max_age``) with its
  properties and ``Toolbus-Dead-Letter-*`` headers saying why, then
  terminated. The consumer's ``max_deliver`` is one more than
  ``max_deliveries``, so even a process that dies while dead-lettering cannot
  cause an endless loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from typing import Any

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription
from nats.js.api import DEFAULT_PREFIX

from toolbus._internal.delivery_buffer import BufferClosed, DeliveryBuffer
from toolbus.ports import Delivery
from toolbus_nats.errors import translate
from toolbus_nats.naming import consumer_name, dead_letter_subject
from toolbus_nats.provisioning import Streams
from toolbus_nats.publishing import MSG_ID
from toolbus_nats.subscription.core import drain_fenced

log = logging.getLogger("toolbus.nats")

_EMPTY: Mapping[str, str] = {}
_NS = 1_000_000_000
# A pull request lives this long before the server ends it and we renew it.
PULL_EXPIRES = 30.0
# While a pull request waits, the server proves it is alive this often. A pull
# request dies silently with its consumer's leader (a node that crashed, a
# leadership that moved); three missed heartbeats renew it, so this bounds how
# long a subscription stalls after a failure in a cluster. Each costs one tiny
# message per second per idle subscription.
PULL_HEARTBEAT = 1.0
# Seconds to wait for JetStream to confirm an ack before sending it again.
ACK_CONFIRM_TIMEOUT = 1.0
_STATUS = "Status"
_PENDING_MESSAGES = "Nats-Pending-Messages"

# Dead-letter headers: the original properties ride along unchanged.
DEAD_LETTER_REASON = "Toolbus-Dead-Letter-Reason"
DEAD_LETTER_DELIVERIES = "Toolbus-Dead-Letter-Deliveries"
DEAD_LETTER_SUBJECT = "Toolbus-Dead-Letter-Subject"
DEAD_LETTER_STREAM = "Toolbus-Dead-Letter-Stream"
DEAD_LETTER_SEQUENCE = "Toolbus-Dead-Letter-Sequence"
DEAD_LETTER_CONSUMER = "Toolbus-Dead-Letter-Consumer"


class JetStreamDelivery:
    """A JetStream message as its subscriber sees it, until acked or nacked."""

    __slots__ = (
        "_msg",
        "_owner",
        "body",
        "enqueued_at",
        "properties",
        "redelivered",
        "settled",
        "since",
    )

    def __init__(self, msg: Msg, owner: PullSubscription, delivered: int, now: float) -> None:
        self._msg = msg
        #: When the stream stored the message: the server's clock, from the ack subject.
        self.enqueued_at: float | None = msg.metadata.timestamp.timestamp()
        self._owner = owner
        self.body = msg.data
        headers = msg.headers
        if headers and MSG_ID in headers:
            # Set by the publisher for JetStream's duplicate detection, not for the reader.
            headers = {name: value for name, value in headers.items() if name != MSG_ID}
        self.properties: Mapping[str, str] = headers or _EMPTY
        self.redelivered = delivered > 1
        self.settled = False
        #: When JetStream last heard that we are working on it (time.monotonic).
        self.since = now

    async def ack(self) -> None:
        if not self.settled:
            self.settled = True
            self._owner.held.discard(self)
            if self._owner.confirm_acks:
                self._owner.confirm_ack(self._msg)
            else:
                await self._owner.send(self._msg.ack, "acknowledge a message")

    async def nack(self) -> None:
        if not self.settled:
            self.settled = True
            self._owner.held.discard(self)
            await self._owner.send(self._msg.nak, "hand a message back")

    async def progress(self, now: float) -> None:
        self.since = now
        await self._msg.in_progress()

    async def give_back(self) -> None:
        """Return it for immediate redelivery (the subscription is closing)."""
        if not self.settled:
            self.settled = True
            await self._msg.nak()


class PullSubscription:
    """One subscription on a persistent queue: a pull consumer feeding a buffer."""

    def __init__(
        self,
        nc: Client,
        streams: Streams,
        subject: str,
        group: str | None,
        on_close: Callable[[PullSubscription], None],
    ) -> None:
        self._nc = nc
        self._streams = streams
        self._options = streams.options
        self.confirm_acks = self._options.confirm_acks
        self.subject = subject
        self.group = group
        self._on_close = on_close
        batch = self._options.pull_batch
        self._batch = batch
        self._refill_at = max(1, batch // 2)
        self._buffer: DeliveryBuffer[Delivery] = DeliveryBuffer(batch)
        #: Deliveries received and not yet acked or nacked (buffered or in use).
        self.held: set[JetStreamDelivery] = set()
        self._requested = 0
        self._last_heard = 0.0
        self._stream = ""
        # Named once: after a reconnect the same consumer is found (or re-made).
        self._consumer = consumer_name(group) if group else f"toolbus-fanout-{uuid.uuid4().hex}"
        self._next_subject = ""
        self._inbox = ""
        self._sub: NatsSubscription | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        #: Acks sent and not yet confirmed by JetStream.
        self._confirming: set[asyncio.Task[None]] = set()
        self._closing = False
        #: stop_intake: no more pull requests; what arrived is still handed out.
        self._intake_stopped = False
        self._where = ",".join(self._options.servers)
        # A pull request counts as activity: renew it well within the time after
        # which the server deletes an idle fan-out consumer.
        expires = PULL_EXPIRES
        if group is None:
            expires = min(expires, self._options.fanout_inactive_threshold / 2)
        self._heartbeat = min(PULL_HEARTBEAT, expires / 2)
        self._pull_options = {
            "expires": int(expires * _NS),
            "idle_heartbeat": int(self._heartbeat * _NS),
        }

    @property
    def consumer(self) -> str:
        return self._consumer

    @property
    def stream(self) -> str:
        return self._stream

    async def start(self) -> None:
        """Make the stream and consumer, open the inbox, ask for the first messages."""
        await self._set_up()
        self._inbox = self._nc.new_inbox()
        self._sub = await self._nc.subscribe(self._inbox, cb=self._on_message)
        self._last_heard = time.monotonic()
        await self._pull()
        self._spawn(self._keep_alive())

    async def _set_up(self) -> None:
        self._stream = await self._streams.stream_for(self.subject)
        await self._streams.consumer(self._stream, self.subject, self.group, self._consumer)
        self._next_subject = f"{DEFAULT_PREFIX}.CONSUMER.MSG.NEXT.{self._stream}.{self._consumer}"

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- flow -------------------------------------------------------------------------

    async def _pull(self) -> None:
        """Keep up to ``pull_batch`` messages requested or buffered."""
        if self._closing or self._intake_stopped or not self._nc.is_connected:
            return
        want = self._batch - self._requested - len(self._buffer)
        if want < self._refill_at and not (want > 0 and self._requested == 0):
            return
        self._requested += want
        request = {"batch": want, **self._pull_options}
        try:
            await self._nc.publish(self._next_subject, json.dumps(request).encode(), self._inbox)
        except Exception:
            # Disconnected: the reconnect handler asks again.
            self._requested -= want
            log.debug("pull request on %s failed", self._consumer, exc_info=True)

    async def _on_message(self, msg: Msg) -> None:
        self._last_heard = time.monotonic()
        headers = msg.headers
        if not msg.reply and headers is not None and _STATUS in headers:
            await self._on_status(headers)
            return
        self._requested = max(0, self._requested - 1)
        delivered = msg.metadata.num_delivered
        if delivered > self._options.max_deliveries:
            await self._dead_letter(msg, delivered - 1)
            await self._pull()
            return
        delivery = JetStreamDelivery(msg, self, delivered, self._last_heard)
        self.held.add(delivery)
        self._buffer.offer(delivery)

    async def _on_status(self, headers: Mapping[str, str]) -> None:
        status = headers[_STATUS]
        if status == "100":
            return  # idle heartbeat: the pull request is alive
        if status in ("404", "408", "409"):
            # The request ended (expired, or the server dropped it); the header
            # says how many of the messages it asked for were never sent.
            unsent = int(headers.get(_PENDING_MESSAGES, self._requested))
            self._requested = max(0, self._requested - unsent)
            if status == "409":
                log.info(
                    "JetStream ended a pull on %s/%s: %s",
                    self._stream,
                    self._consumer,
                    headers.get("Description", ""),
                )
                if "Consumer Deleted" in headers.get("Description", ""):
                    self._requested = 0
                    self._spawn(self._recover())
                    return
            await self._pull()
            return
        log.warning(
            "unexpected JetStream status %s on %s: %s", status, self._consumer, dict(headers)
        )

    async def _dead_letter(self, msg: Msg, deliveries: int) -> None:
        metadata = msg.metadata
        headers = dict(msg.headers or {})
        headers.update(
            {
                DEAD_LETTER_REASON: (
                    f"not acknowledged after {deliveries} deliveries: each was nacked, or its "
                    f"consumer did not ack within ack_wait ({self._options.ack_wait:g} s)"
                ),
                DEAD_LETTER_DELIVERIES: str(deliveries),
                DEAD_LETTER_SUBJECT: msg.subject,
                DEAD_LETTER_STREAM: metadata.stream,
                DEAD_LETTER_SEQUENCE: str(metadata.sequence.stream),
                DEAD_LETTER_CONSUMER: metadata.consumer,
            }
        )
        target = dead_letter_subject(self.subject)
        try:
            stream = await self._streams.dead_letter_stream(self.subject)
            await self._streams.js.publish(
                target,
                msg.data,
                timeout=self._options.publish_timeout,
                stream=stream,
                headers=headers,
            )
            await msg.term()
        except Exception:
            # Not terminated: JetStream stops after max_deliver anyway, so no loop.
            log.exception(
                "could not move message %s of %s to %s",
                metadata.sequence.stream,
                self._stream,
                target,
            )
            return
        log.warning(
            "message %s of %s went to %s after %d deliveries without an ack",
            metadata.sequence.stream,
            self._stream,
            target,
            deliveries,
        )

    async def _keep_alive(self) -> None:
        """Report progress on held deliveries; renew a pull request that went silent."""
        interval = self._options.ack_wait / 3
        tick = min(interval, self._heartbeat)
        while not self._closing:
            await asyncio.sleep(tick)
            if not self._nc.is_connected:
                continue
            now = time.monotonic()
            for delivery in list(self.held):
                if not delivery.settled and now - delivery.since >= interval:
                    try:
                        await delivery.progress(now)
                    except Exception:
                        log.debug("progress report failed", exc_info=True)
            if now - self._last_heard > 3 * self._heartbeat and self._requested:
                # No message and no heartbeat: the pull request is gone.
                self._requested = 0
                self._last_heard = now
                await self._pull()

    async def _recover(self) -> None:
        """After a reconnect or a lost consumer: make sure it exists, then pull again."""
        try:
            self._streams.forget(self.subject)
            await self._set_up()
        except Exception:
            log.exception("could not restore consumer %s on %s", self._consumer, self.subject)
        self._requested = 0
        self._last_heard = time.monotonic()
        await self._pull()

    def reconnected(self) -> None:
        """The connection is back: pull requests made before were lost with it."""
        if not self._closing:
            self._spawn(self._recover())

    # -- reading ---------------------------------------------------------------------

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self

    async def __anext__(self) -> Delivery:
        try:
            delivery = await self._buffer.get()
        except BufferClosed:
            raise StopAsyncIteration from None
        if self._requested + len(self._buffer) < self._refill_at:
            await self._pull()
        return delivery

    def confirm_ack(self, msg: Msg) -> None:
        """Acknowledge ``msg`` until JetStream confirms it, in the background.

        In a cluster an ack can be lost while the consumer's leadership moves to
        another node (or with the node this connection was attached to); the new
        leader would then deliver the message again after ``ack_wait``, to any
        member of the group, and the tool would run twice. So (with the
        ``confirm_acks`` option, on by default) every ack asks for the server's
        confirmation and is sent again, for up to ``ack_wait``, until it has one.
        """
        if self._nc.is_closed:
            raise translate(
                nats.errors.ConnectionClosedError(), "acknowledge a message", self._where
            )
        task = asyncio.get_running_loop().create_task(self._confirmed_ack(msg))
        self._confirming.add(task)
        task.add_done_callback(self._confirming.discard)

    async def _confirmed_ack(self, msg: Msg) -> None:
        ack_wait = self._options.ack_wait
        deadline = time.monotonic() + ack_wait
        attempt = min(ACK_CONFIRM_TIMEOUT, ack_wait / 4)
        while True:
            started = time.monotonic()
            try:
                await msg.ack_sync(timeout=attempt)
                return
            except Exception as exc:
                if self._nc.is_closed or time.monotonic() + attempt > deadline:
                    log.warning(
                        "JetStream did not confirm the ack of message %s on %s (%s); "
                        "it may be delivered again",
                        msg.metadata.sequence.stream,
                        self._consumer,
                        exc or type(exc).__name__,
                    )
                    return
                log.debug("ack of %s not confirmed yet; sending it again", self._consumer)
                # A quick refusal (no leader to answer yet) must not become a busy loop.
                await asyncio.sleep(max(0.0, started + attempt - time.monotonic()))

    async def send(self, action: Callable[[], Awaitable[None]], doing: str) -> None:
        """Run an ack-like action, reporting failures as toolbus errors."""
        try:
            await action()
        except Exception as exc:
            raise translate(exc, doing, self._where) from exc

    def fail(self, error: BaseException) -> None:
        """The connection is gone for good: readers get ``error``."""
        self._buffer.close(error)

    async def stop_intake(self) -> None:
        """Ask for no more messages and leave the inbox; hand out what was sent here."""
        if self._closing or self._intake_stopped:
            return
        self._intake_stopped = True
        for task in list(self._tasks):  # keeping pull requests alive, recovering
            task.cancel()
        sub, self._sub = self._sub, None
        if sub is not None and not self._nc.is_closed and self._nc.is_connected:
            try:
                # UNSUB, then a round trip: everything already sent to us has arrived
                # when this returns. JetStream sends a pull request's messages only
                # while its inbox has interest; the group's other members take the rest.
                async with asyncio.timeout(self._options.publish_timeout):
                    await drain_fenced(self._nc, sub)
            except Exception:
                log.debug("draining %s failed", self._inbox, exc_info=True)
        self._buffer.finish()

    async def close(self) -> None:
        """Stop; every delivery not acked yet goes back to JetStream for redelivery now."""
        if self._closing:
            return
        self._closing = True
        self._buffer.close()
        self._on_close(self)
        for task in list(self._tasks):
            task.cancel()
        sub, self._sub = self._sub, None
        usable = not self._nc.is_closed and self._nc.is_connected
        if sub is not None and usable:
            try:
                # UNSUB, then a round trip: everything already sent to us has arrived
                # (and landed in ``held``) when this returns.
                async with asyncio.timeout(self._options.publish_timeout):
                    await drain_fenced(self._nc, sub)
            except Exception:
                log.debug("draining %s failed", self._inbox, exc_info=True)
        elif sub is not None and not self._nc.is_closed:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        confirming, self._confirming = self._confirming, set()
        if confirming and usable:
            # Acks already sent are seen through before the connection may go.
            await asyncio.wait(confirming, timeout=self._options.publish_timeout)
        for task in confirming:
            task.cancel()
        held, self.held = self.held, set()
        self._buffer.take_all()
        if usable:
            for delivery in held:
                with contextlib.suppress(Exception):
                    await delivery.give_back()
            if self.group is None and self._stream:
                with contextlib.suppress(Exception):
                    await self._streams.js.delete_consumer(self._stream, self._consumer)
