"""Requests a service moves aside instead of serving: its request queue's dead letters.

A signed call that waited in an at-least-once queue longer than the service's
maximum queue age is not run (its token vouched for it long ago) and not lost
either: the host publishes it, body and properties unchanged plus the
``dead-letter-*`` properties below, to the queue
:func:`~toolbus.domain.calls.queues.dead_letter_queue` names, and acks the
original. Each move is counted (``toolbus_service_dead_letters_total``) and
logged, and ``toolbus dead-letters QUEUE`` lists (and drops) what is there.

Dead letters are read by the competing-consumer group :data:`DEAD_LETTERS_GROUP`.
Brokers keep messages for a group from when it was first made, so a host makes
it before it moves its first request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.calls import wire
from toolbus.domain.calls.queues import dead_letter_queue
from toolbus.domain.errors import WireError
from toolbus.ports import Bus, Delivery

log = logging.getLogger("toolbus.service")

#: The group that reads a queue's dead letters (``toolbus dead-letters``).
DEAD_LETTERS_GROUP = "toolbus-dead-letters"
#: Properties a dead letter carries besides the request's own.
PROP_REASON = "dead-letter-reason"
PROP_FROM = "dead-letter-from"
PROP_ENQUEUED_AT = "dead-letter-enqueued-at"
PROP_MOVED_AT = "dead-letter-moved-at"
#: The ``reason`` label values of ``toolbus_service_dead_letters_total``.
QUEUED_TOO_LONG = "queued-too-long"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """One dead letter as ``toolbus dead-letters`` shows it."""

    call_id: str
    user: str
    reason: str
    source: str
    enqueued_at: float | None
    moved_at: float | None

    @classmethod
    def of(cls, properties: Mapping[str, str], body: bytes = b"") -> DeadLetter:
        """A dead letter from its message; the user from the body where no property names one."""
        user = properties.get(wire.PROP_USER, "")
        if not user and body:
            try:
                user = wire.decode_request(body).user
            except WireError:
                user = ""
        return cls(
            call_id=properties.get(wire.PROP_ID, ""),
            user=user,
            reason=properties.get(PROP_REASON, ""),
            source=properties.get(PROP_FROM, ""),
            enqueued_at=_seconds(properties.get(PROP_ENQUEUED_AT)),
            moved_at=_seconds(properties.get(PROP_MOVED_AT)),
        )


class DeadLetters:
    """Moves one service's requests to its request queue's dead letters."""

    def __init__(
        self,
        bus: Bus,
        service: str,
        request_queue: str,
        metrics: ToolbusMetrics,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.bus = bus
        self.service = service
        self.source = request_queue
        #: Where the moved requests go.
        self.queue = dead_letter_queue(request_queue)
        self._metrics = metrics
        self._clock = clock
        self._group_made = False
        self._warnings = ThrottledLog(log)

    async def move(self, delivery: Delivery, reason: str, label: str) -> None:
        """Publish ``delivery`` to the dead letters with ``reason``; the caller acks it."""
        if not self._group_made:
            # Made once, then left: the group keeps what arrives for its next reader.
            subscription = await self.bus.subscribe(self.queue, group=DEAD_LETTERS_GROUP)
            await subscription.close()
            self._group_made = True
        properties = dict(delivery.properties)
        properties[PROP_REASON] = reason
        properties[PROP_FROM] = self.source
        properties[PROP_MOVED_AT] = f"{self._clock():.3f}"
        enqueued = getattr(delivery, "enqueued_at", None)
        if enqueued is not None:
            properties[PROP_ENQUEUED_AT] = f"{enqueued:.3f}"
        await self.bus.publish(self.queue, delivery.body, properties)
        self._metrics.dead_lettered(self.service, label)
        self._warnings.warning(
            f"dead-letter {label}",
            "%r: moved call %s to %s: %s; list them with: toolbus dead-letters %s",
            self.service,
            properties.get(wire.PROP_ID, "?"),
            self.queue,
            reason,
            self.source,
        )


def _seconds(text: str | None) -> float | None:
    try:
        return float(text) if text else None
    except ValueError:
        return None
