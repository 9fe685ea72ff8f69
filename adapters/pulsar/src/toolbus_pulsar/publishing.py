"""One producer per topic: sends, their receipts, and a bound on sends in flight.

Every send is receipted by the broker, and pulsar-client reports the receipt
through a callback on one of its threads. Whether ``publish`` waits for it
depends on the topic:

* **persistent**: always. The service host acknowledges a request only after
  its answer is published, so "published" must mean "the broker has it".
* **non-persistent**: not by default. Pulsar delivers these at most once and a
  receipt says nothing about delivery, while waiting for it costs every send a
  round trip through the event loop (about a third of the throughput). A send
  that fails at once raises at once; one that fails later (the broker is gone)
  is logged, and raised by the next ``publish`` to that topic. Option
  ``confirm_non_persistent`` makes these wait too.

Either way at most ``max_pending_messages`` sends per topic are unreceipted:
beyond that ``publish`` waits (backpressure), rather than have pulsar-client
fail the send or block the event loop. The count is kept under a lock on the
receipt's own thread, so that a receipt nobody waits for never wakes the loop.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import pulsar

from toolbus.domain.errors import MessageTooLarge, ToolbusError
from toolbus_pulsar.handoff import Handoff, handoff

log = logging.getLogger("toolbus_pulsar")

HOW_TO_RAISE = (
    "raise the broker's maxMessageSize and this bus's 'max_message_size' option together, "
    "or send less"
)

Describe = Callable[[pulsar.Result, str], ToolbusError]


class Sender:
    """A producer on one topic, with its receipts and its bound on sends in flight."""

    __slots__ = (
        "_blocked",
        "_describe",
        "_lock",
        "_waiting",
        "confirm",
        "failure",
        "in_flight",
        "limit",
        "producer",
        "size_limit",
        "topic",
    )

    def __init__(
        self,
        producer: pulsar.Producer,
        topic: str,
        *,
        limit: int,
        size_limit: int,
        confirm: bool,
        describe: Describe,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.limit = limit
        self.size_limit = size_limit
        self.confirm = confirm
        self._describe = describe
        # Guarded by _lock: receipts arrive on pulsar-client's threads.
        self._lock = threading.Lock()
        self.in_flight = 0
        self._blocked = False  # a publisher waits for a slot
        self._waiting: deque[asyncio.Future[None]] = deque()  # loop only
        #: An unconfirmed send that failed after ``send`` returned, for the next one to raise.
        self.failure: ToolbusError | None = None

    async def send(self, body: bytes, properties: Mapping[str, str] | None) -> None:
        """Send ``body``; see the module docstring for when this waits for the broker."""
        loop = asyncio.get_running_loop()
        to_loop = handoff(loop)
        with self._lock:
            room = self.in_flight < self.limit
            if room:
                self.in_flight += 1  # taken before the call: the receipt may come at once
        if not room:
            await self._slot()
        failure = self.failure
        if failure is not None:
            self.failure = None
            self._receipted(to_loop)
            raise failure
        if properties is not None and type(properties) is not dict:
            properties = dict(properties)  # pulsar-client insists on a dict
        if self.confirm:
            future: asyncio.Future[pulsar.Result] = loop.create_future()
            confirmed = _Confirmed(self, to_loop, future)
            self._queue(body, properties, confirmed, to_loop)
            self._check(await future, len(body))
            return
        unconfirmed = _Unconfirmed(self, to_loop)
        self._queue(body, properties, unconfirmed, to_loop)
        failed_at_once = unconfirmed.result
        if failed_at_once is not None and failed_at_once != pulsar.Result.Ok:
            unconfirmed.reported = True  # raised here, not again by the next send
            self._check(failed_at_once, len(body))

    def _queue(
        self,
        body: bytes,
        properties: dict[str, str] | None,
        receipt: Callable[[pulsar.Result, Any], None],
        to_loop: Handoff,
    ) -> None:
        try:
            self.producer.send_async(body, receipt, properties=properties)
        except BaseException:
            self._receipted(to_loop)  # refused before it was queued: no receipt will come
            raise

    def _check(self, result: pulsar.Result, size: int) -> None:
        if result == pulsar.Result.Ok:
            return
        if result == pulsar.Result.MessageTooBig:
            # The broker's limit (less pulsar-client's headroom for headers) is below
            # ours: the body and its metadata did not fit.
            raise MessageTooLarge(size, self.size_limit, HOW_TO_RAISE)
        raise self._describe(result, f"publish to {self.topic}")

    # -- slots --------------------------------------------------------------------------

    def _receipted(self, to_loop: Handoff) -> None:
        """One send is no longer in flight. Any thread."""
        with self._lock:
            self.in_flight -= 1
            blocked, self._blocked = self._blocked, False
        if blocked:
            to_loop.call(self._wake)

    def _wake(self) -> None:
        # Every waiter looks again; those that still find no room block again.
        waiting, self._waiting = self._waiting, deque()
        for waiter in waiting:
            if not waiter.done():
                waiter.set_result(None)

    async def _slot(self) -> None:
        """Wait for room, then take it."""
        loop = asyncio.get_running_loop()
        while True:
            with self._lock:
                if self.in_flight < self.limit:
                    self.in_flight += 1
                    return
                self._blocked = True
            # A receipt arriving now hands _wake to the loop, which runs it only
            # after this waiter is queued: no wake-up is missed.
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiting.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    # -- failures and closing -----------------------------------------------------------

    def failed_later(self, result: pulsar.Result) -> None:
        """An unconfirmed send failed after ``send`` returned: tell the next one. Loop."""
        error = self._describe(result, f"publish to {self.topic}")
        log.warning("a send to %s failed after publish returned: %s", self.topic, error)
        self.failure = error

    def close(self) -> None:
        """Send what is still queued, then close (blocking: run on a worker thread).

        Without a connection nothing queued can be sent: flushing would wait out
        the send timeout, so the producer is left to the client's shutdown.
        """
        if not self.producer.is_connected():
            log.debug("not flushing the producer for %s: not connected", self.topic)
            return
        try:
            self.producer.flush()
            self.producer.close()
        except pulsar.PulsarException as exc:
            log.debug("closing the producer for %s failed: %s", self.topic, exc)


class _Confirmed:
    """pulsar-client's callback for a send that ``publish`` waits for."""

    __slots__ = ("_future", "_sender", "_to_loop")

    def __init__(
        self, sender: Sender, to_loop: Handoff, future: asyncio.Future[pulsar.Result]
    ) -> None:
        self._sender = sender
        self._to_loop = to_loop
        self._future = future

    def __call__(self, result: pulsar.Result, _message_id: Any) -> None:
        # On a pulsar-client thread, or on the sending one when the send failed at once.
        self._sender._receipted(self._to_loop)
        self._to_loop.call(_settle, self._future, result)


class _Unconfirmed:
    """pulsar-client's callback for a send that ``publish`` does not wait for."""

    __slots__ = ("_sender", "_to_loop", "reported", "result")

    def __init__(self, sender: Sender, to_loop: Handoff) -> None:
        self._sender = sender
        self._to_loop = to_loop
        #: Set when the send failed at once, before ``send_async`` returned.
        self.result: pulsar.Result | None = None
        #: Set by a sender that has already raised this result.
        self.reported = False

    def __call__(self, result: pulsar.Result, _message_id: Any) -> None:
        self.result = result
        if result != pulsar.Result.Ok:  # the only case that needs the loop
            # Reported before the slot is freed: the hand-off runs calls in order,
            # so a publisher woken by that slot already finds the failure.
            self._to_loop.call(self._failed)
        self._sender._receipted(self._to_loop)

    def _failed(self) -> None:
        if not self.reported and self.result is not None:
            self._sender.failed_later(self.result)


def _settle(future: asyncio.Future[pulsar.Result], result: pulsar.Result) -> None:
    if not future.done():  # the publisher may have been cancelled
        future.set_result(result)
