"""Answers on the calling side: the calls waiting for them, and one listener per response queue.

A bus that pushes (:class:`~toolbus.ports.PushBus`) hands answers to the
listener directly; otherwise a task of the client's reads a subscription for
it. Either way the listener routes each answer to the call waiting under its
``id`` and drops answers for ids it does not know: other clients share the
response queue.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from typing import Any

from toolbus.domain.calls import wire
from toolbus.domain.errors import ToolCallError, ToolServiceError, WireError, error_for
from toolbus.ports import Delivery, Listener, Subscription


class Waiter:
    """Collects the answer(s) to one call."""

    __slots__ = (
        "after_execution",
        "chunks",
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
            self.error = error_for(response.error_type, response.error_message)
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
    """

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.waiters: dict[str, Waiter] = {}
        self.source: Listener | Subscription | None = None

    def on_message(self, delivery: Delivery) -> None:
        waiter = self.waiters.get(delivery.properties.get(wire.PROP_ID, ""))
        if waiter is None:
            return
        try:
            response = wire.decode_response(delivery.body)
        except WireError as exc:
            waiter.fail(ToolServiceError(f"unreadable answer from the service: {exc}"))
            return
        waiter.deliver(response)
        if response.end_of_stream:
            waiter.after_execution = delivery.properties.get(wire.PROP_AFTER_EXECUTION)

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
