"""Answers on the calling side: the calls waiting for them, one listener per response queue,
and one alarm that expires the calls whose time ran out.

A bus that pushes (:class:`~toolbus.ports.PushBus`) hands answers to the
listener directly; otherwise a task of the client's reads a subscription for
it. Either way the listener routes each answer to the call waiting under its
``id`` and drops answers for ids it does not know: other clients share the
response queue.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections import OrderedDict, deque
from typing import Any

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import input_error
from toolbus.domain.errors import ToolCallError, ToolServiceError, WireError
from toolbus.ports import Delivery, Listener, Subscription

#: Answers after the end of their stream: one line a minute per response queue.
_late_chunks = ThrottledLog(logging.getLogger("toolbus.client"))
#: How many ended calls a response listener remembers, to recognise late answers.
ENDED_CALLS_KEPT = 4096


class Waiter:
    """Collects the answer(s) to one call."""

    __slots__ = (
        "after_execution",
        "chunks",
        "cost",
        "deadline",
        "error",
        "finished",
        "interrupted",
        "loop",
        "sending",
        "timed_out",
        "wakeup",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, deadline: float = math.inf) -> None:
        self.loop = loop
        #: Event-loop time at which the call times out (inf: someone else watches).
        self.deadline = deadline
        self.chunks: deque[str] = deque()
        self.after_execution: str | None = None
        #: What the call cost, as the service said on its last response.
        self.cost: float | None = None
        self.error: ToolCallError | None = None
        self.finished = False
        self.timed_out = False
        #: The caller's task while its request is being published, so that the
        #: deadline can interrupt a publish held up by backpressure or a dead broker.
        self.sending: asyncio.Task[Any] | None = None
        self.interrupted = False
        self.wakeup: asyncio.Future[None] | None = None

    def deliver(self, response: wire.ToolResponse) -> None:
        if self.finished:
            return
        if response.error_type is not None:
            self.error = input_error(response.error_type, response.error_message, response.input)
            self.finished = True
        else:
            if response.response:
                self.chunks.append(response.response)
            self.finished = response.end_of_stream
        self._wake()

    def fail(self, error: ToolCallError) -> None:
        if not self.finished:
            self.error = error
            self.finished = True
            self._wake()

    def expire(self) -> None:
        if not self.finished:
            self.timed_out = True
            self.finished = True
            self._wake()
            if self.sending is not None:
                self.interrupted = True
                self.sending.cancel()

    def _wake(self) -> None:
        wakeup = self.wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def wait(self) -> None:
        """Wait for the next delivery (made only when nothing is pending: one future a call)."""
        self.wakeup = self.loop.create_future()
        try:
            await self.wakeup
        finally:
            self.wakeup = None


class ResponseListener:
    """The one subscription on a response queue, and the calls waiting on it.

    A bus that pushes (:class:`~toolbus.ports.PushBus`) hands answers to
    :meth:`on_message` directly; otherwise :meth:`pump` reads a subscription in
    a task of the client's. Either way, answers for ids we do not know are
    dropped: other clients share the response queue.

    An answer for a call whose stream has already ended is not dropped
    silently: the broker delivered the call's messages out of order (a chunk
    overtaken by the end of the stream, so the caller got the answer cut short),
    or the service answered twice. The ids of the last :data:`ENDED_CALLS_KEPT`
    ended calls are kept to recognise such chunks, which are logged (once a
    minute per response queue, with a count) and counted in :attr:`late_chunks`.
    """

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.waiters: dict[str, Waiter] = {}
        self.source: Listener | Subscription | None = None
        #: Ids of calls whose answer has ended, oldest first (a bounded memory). An
        #: OrderedDict: a plain dict finds its oldest key by walking past every key
        #: deleted since it last resized, microseconds per call when thousands are kept.
        self.ended: OrderedDict[str, None] = OrderedDict()
        #: Chunks that arrived after their call's end of stream.
        self.late_chunks = 0

    def on_message(self, delivery: Delivery) -> None:
        call_id = delivery.properties.get(wire.PROP_ID, "")
        waiter = self.waiters.get(call_id)
        if waiter is None or waiter.finished:
            if call_id in self.ended:
                self._late(call_id)
            return
        try:
            response = wire.decode_response(delivery.body)
        except WireError as exc:
            waiter.fail(ToolServiceError(f"unreadable answer from the service: {exc}"))
            return
        waiter.deliver(response)
        if response.end_of_stream:
            properties = delivery.properties
            waiter.after_execution = properties.get(wire.PROP_AFTER_EXECUTION)
            if wire.PROP_COST in properties:
                waiter.cost = wire.read_cost(properties[wire.PROP_COST])
        if response.end_of_stream or response.error_type is not None:  # the call's last
            ended = self.ended
            ended[call_id] = None
            if len(ended) > ENDED_CALLS_KEPT:
                ended.popitem(last=False)

    def _late(self, call_id: str) -> None:
        self.late_chunks += 1
        _late_chunks.warning(
            self.queue,
            "an answer to call %s on %s arrived after the call's end of stream: the "
            "broker delivered the call's messages out of order, so its caller got the "
            "answer cut short (on Kafka, a response topic needs one partition for "
            "producers that send without a key), or the service answered twice; "
            "%d such answer(s) so far",
            call_id,
            self.queue,
            self.late_chunks,
        )

    def on_end(self, error: BaseException | None = None) -> None:
        for waiter in list(self.waiters.values()):
            waiter.fail(ToolServiceError(f"the response subscription on {self.queue} ended"))

    async def pump(self, subscription: Subscription) -> None:
        """Read ``subscription`` until it ends, for a bus that cannot push."""
        try:
            async for delivery in subscription:
                self.on_message(delivery)
                await delivery.ack()
        finally:
            self.on_end()

    async def close(self) -> None:
        if self.source is not None:
            await self.source.close()


class DeadlineAlarm:
    """One timer for every call of a client, armed at the earliest deadline among them:
    far cheaper than a timer per call, and exact."""

    __slots__ = ("_handle", "_listeners", "at")

    def __init__(self, listeners: dict[str, ResponseListener]) -> None:
        self._listeners = listeners
        self._handle: asyncio.TimerHandle | None = None
        #: When it goes off next (loop time); ``inf`` when unarmed.
        self.at = math.inf

    def set(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        """Go off at ``when`` (the loop's time) instead."""
        if self._handle is not None:
            self._handle.cancel()
        self.at = when
        self._handle = loop.call_at(when, self._sound, loop) if when < math.inf else None

    def cancel(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._handle, self.at = None, math.inf

    def _sound(self, loop: asyncio.AbstractEventLoop) -> None:
        """Expire every call whose deadline has passed; re-arm for the next one."""
        now = loop.time()
        earliest = math.inf
        for listener in self._listeners.values():
            for waiter in list(listener.waiters.values()):
                if waiter.deadline <= now:
                    waiter.expire()
                elif waiter.deadline < earliest:
                    earliest = waiter.deadline
        self._handle = None
        self.set(loop, earliest)
