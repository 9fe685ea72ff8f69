"""Which tool services are running: their replicas and when each was last heard.

The gateway listens to the announcements itself (beside any live registry)
so that the console can show replicas and announcement ages even when the
tools come from a fixed configuration file.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from toolbus.application.live.announcements import ANNOUNCEMENTS_QUEUE, PROBE_QUEUE
from toolbus.domain.config.descriptors import DEFAULT_GROUP
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Announcement, AnnouncementTable, Probe, Withdrawal
from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.gateway")


@dataclass(frozen=True, slots=True)
class LiveService:
    """One announced service as the console and ``GET /v1/services`` show it."""

    service: str
    replicas: tuple[str, ...]
    #: Seconds since any replica was last heard.
    age: float
    #: Seconds until the last replica expires unless heard again.
    expires_in: float
    request_queue: str | None
    tools: tuple[str, ...]
    #: Each announced tool's groups, by tool name.
    groups: dict[str, tuple[str, ...]]


class ServiceWatch:
    """Follows announcements and withdrawals; calls ``on_change`` after each one."""

    def __init__(
        self,
        bus: Bus,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.bus = bus
        self._clock = clock
        self._on_change = on_change
        self._table = AnnouncementTable()
        self._heard: dict[tuple[str, str], tuple[float, float]] = {}  # -> (when, ttl)

    def services(self) -> list[LiveService]:
        """The live services, by id."""
        now = self._clock()
        if self._table.expire(now):
            self._forget_expired()
        found = []
        for announcement in self._table.current():
            replicas = tuple(self._table.instances(announcement.service))
            heard = [self._heard[(announcement.service, r)] for r in replicas]
            last = max(when for when, _ in heard)
            expires = max(when + ttl for when, ttl in heard)
            queue = announcement.descriptor.get("request-queue")
            found.append(
                LiveService(
                    service=announcement.service,
                    replicas=replicas,
                    age=max(0.0, now - last),
                    expires_in=max(0.0, expires - now),
                    request_queue=queue if isinstance(queue, str) else None,
                    tools=tuple(
                        str(tool.get("name", key)) for key, tool in announcement.tools.items()
                    ),
                    groups={
                        str(tool.get("name", key)): announced_groups(tool.get("group"))
                        for key, tool in announcement.tools.items()
                    },
                )
            )
        return found

    def receive(self, body: bytes) -> None:
        """Take in one message from the announcements queue."""
        try:
            message = messages.decode(body)
        except ValueError as exc:
            log.warning("ignoring a malformed announcement: %s", exc)
            return
        now = self._clock()
        if isinstance(message, Announcement):
            self._table.receive(message, now)
            self._heard[(message.service, message.instance)] = (now, message.ttl)
        elif isinstance(message, Withdrawal):
            self._table.withdraw(message)
            self._heard.pop((message.service, message.instance), None)
        else:
            return
        self._on_change()

    async def probe(self) -> None:
        """Ask every running service to announce itself now."""
        try:
            await self.bus.publish(PROBE_QUEUE, messages.encode(Probe()))
        except Exception as exc:  # they announce at their interval anyway
            log.warning("could not ask services to announce themselves: %s", exc)

    async def follow(self, subscription: Subscription) -> None:
        """Read announcements until the subscription ends."""
        async for delivery in subscription:
            self.receive(delivery.body)
            await delivery.ack()

    async def subscribe(self) -> Subscription:
        return await self.bus.subscribe(ANNOUNCEMENTS_QUEUE)

    def _forget_expired(self) -> None:
        live = {(s, i) for s in self._table.services() for i in self._table.instances(s)}
        for key in [key for key in self._heard if key not in live]:
            del self._heard[key]


def announced_groups(value: object) -> tuple[str, ...]:
    """An announced tool's ``group``: a list of names, else the default group."""
    if isinstance(value, list) and all(isinstance(group, str) for group in value):
        return tuple(value)
    return (DEFAULT_GROUP,)
