"""Answers a host has sent, so that a redelivered request is answered without running again.

Only on at-least-once (persistent) request queues, where redelivery happens: a
broker redelivers a request whose ack was lost, or whose first delivery's
consumer went away. The tool runs once; the copy gets the recorded answer.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict

from toolbus.application.calls._replies import AnswerNotPublished
from toolbus.application.calls.service import ToolService
from toolbus.ports import Bus, Delivery

log = logging.getLogger("toolbus.service")


class AnswerMemory:
    """Answers already sent, so a redelivered request is answered without running again.

    Only on at-least-once (persistent) request queues, where redelivery happens.
    Bounded by count and by bytes; the oldest answers are forgotten first.
    """

    def __init__(self, service: ToolService, bus: Bus, max_calls: int, max_bytes: int) -> None:
        self.service = service
        self.bus = bus
        self.max_calls = max_calls
        self.max_bytes = max_bytes
        self.bytes = 0
        self.answers: OrderedDict[tuple[str, int], list[tuple[bytes, dict[str, str]]]] = (
            OrderedDict()
        )
        #: Requests running now; the event is set when each one is settled.
        self.in_progress: dict[tuple[str, int], asyncio.Event] = {}

    async def settle_duplicate(self, key: tuple[str, int], delivery: Delivery) -> bool:
        """Handle a request seen before; False when it is new (and now in progress).

        Raises :class:`AnswerNotPublished`, leaving the delivery unsettled, when
        the broker does not take the recorded answer.
        """
        call_id = key[0]
        sent = self.answers.get(key)
        if sent is not None:
            log.info(
                "%r: call %s was answered before; sending the recorded answer",
                self.service.id,
                call_id,
            )
            try:
                for body, properties in sent:
                    await self.bus.publish(self.service.response_queue, body, properties)
            except Exception as exc:
                raise AnswerNotPublished(exc, final=True) from exc
            await delivery.ack()
            return True
        running = self.in_progress.get(key)
        if running is not None:
            # Redelivered while the first delivery is still running (an ack wait ran
            # out). Running the tool twice is what we avoid; losing the call if the
            # first delivery is then cut off would be worse. So the first one's
            # outcome settles this copy: answered, it is acked; not, it goes back.
            log.info("%r: call %s is already running; waiting for it", self.service.id, call_id)
            await running.wait()
            await (delivery.ack() if key in self.answers else delivery.nack())
            return True
        self.in_progress[key] = asyncio.Event()
        return False

    def remember(self, key: tuple[str, int], sent: list[tuple[bytes, dict[str, str]]]) -> None:
        self.answers[key] = sent
        self.bytes += sum(len(body) for body, _ in sent)
        while self.answers and (len(self.answers) > self.max_calls or self.bytes > self.max_bytes):
            _, dropped = self.answers.popitem(last=False)
            self.bytes -= sum(len(body) for body, _ in dropped)

    def finished(self, key: tuple[str, int]) -> None:
        settled = self.in_progress.pop(key, None)
        if settled is not None:
            settled.set()
