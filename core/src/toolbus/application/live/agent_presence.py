"""Agent services say on the bus that they answer, so that an asker knows at once when none does.

An :class:`AgentPresence` runs beside an
:class:`~toolbus.application.agent.service.AgentService` (``toolbus agent serve``
runs one): it announces the
service's request and response queues on :data:`AGENT_ANNOUNCEMENTS_QUEUE` when
it starts, every ``interval`` seconds, and at once when an asker probes on
:data:`AGENT_PROBE_QUEUE`; it withdraws when the service stops. The messages
are the tool services' announcements (:mod:`toolbus.domain.live.announcements`),
on queues of their own, so agents never mistake an agent service for a tool.

:func:`agent_service_answers` is the asker's side: probe, and wait a bounded
time for an agent service on the request queue to say so. A request sent where
none answers would otherwise wait out its whole timeout in silence.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, Field

from toolbus.application.live.probes import (
    PassingFailures,
    ProbeAnswers,
    publish_or_wait,
    publish_until_stopped,
    subscribe_probes,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import BusClosed
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Announcement, Probe, Withdrawal
from toolbus.ports import Bus, broker_known_gone

log = logging.getLogger("toolbus.agent")

#: What an agent service calls itself in its announcements.
AGENT_SERVICE = "agent"
#: An agent's name unless it is given one.
AGENT_NAME = "agent"


class ProfileTool(BaseModel):
    """A tool the agent may use, as its profile shows it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str
    description: str = ""


class AgentProfile(BaseModel):
    """Who an agent service is, as it announces itself: a ``name`` (unique per agent on
    a broker), a ``description``, and the tools it may use in each tool ``groups``."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    name: str = AGENT_NAME
    description: str = ""
    groups: dict[str, list[ProfileTool]] = Field(default_factory=dict)

    @classmethod
    def of(cls, registry: Registry, *, name: str, description: str = "") -> AgentProfile:
        """The profile of an agent that uses ``registry``'s tools."""
        groups: dict[str, list[ProfileTool]] = {}
        for tool in registry.tools.values():
            for group in tool.groups:
                entry = ProfileTool(name=tool.name, description=tool.description)
                groups.setdefault(group, []).append(entry)
        return cls(name=name, description=description, groups=dict(sorted(groups.items())))


AGENT_ANNOUNCEMENTS_QUEUE = "non-persistent://toolbus/agents/announcements"
AGENT_PROBE_QUEUE = "non-persistent://toolbus/agents/probe"
#: Seconds between an agent service's announcements.
DEFAULT_INTERVAL = 10.0


class AgentPresence:
    """Announces that an agent service answers on ``request_queue`` until stopped.

    ``profile`` says who the agent is (its name, a description, and its tools by
    group): doors that show agents to other programs (``toolbus a2a serve``'s Agent
    Cards) read it from the announcement.
    """

    def __init__(
        self,
        bus: Bus,
        request_queue: str,
        response_queue: str,
        *,
        interval: float = DEFAULT_INTERVAL,
        profile: AgentProfile | None = None,
    ) -> None:
        self.bus = bus
        self.interval = interval
        descriptor: dict[str, Any] = {
            "id": AGENT_SERVICE,
            "request-queue": request_queue,
            "response-queue": response_queue,
        }
        if profile is not None:
            descriptor["profile"] = profile.model_dump(mode="json")
        self.announcement = Announcement(
            AGENT_SERVICE, uuid.uuid4().hex, descriptor, {}, interval * 3
        )
        self._probes = ProbeAnswers(self.announce)
        self._stop = anyio.Event()
        self._failures = PassingFailures()
        #: Announcements published so far, for tests.
        self.announced = 0

    def stop(self) -> None:
        """End :meth:`run`, which then withdraws the announcement."""
        self._stop.set()

    async def announce(self) -> None:
        body = messages.encode(self.announcement)
        published = await publish_or_wait(  # else the next interval tries again
            lambda: self.bus.publish(AGENT_ANNOUNCEMENTS_QUEUE, body),
            what="announce the agent service",
            failures=self._failures,
            retry_in=self.interval,
        )
        if not published:
            return
        self._probes.answered()
        self.announced += 1

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Announce now, on every probe and every interval, until stopped; then withdraw."""
        self._stop = anyio.Event()
        probes = await subscribe_probes(
            self.bus, AGENT_PROBE_QUEUE, "the agent service", self.interval
        )
        try:
            await publish_until_stopped(
                self.announce,
                self._probes,
                probes,
                every=self.interval,
                stop=self._stop,
                task_status=task_status,
            )
        except BusClosed:
            log.info("stopped announcing the agent service: the bus is closed")
        finally:
            with anyio.CancelScope(shield=True):
                if probes is not None:
                    await probes.close()
                await self._withdraw()

    async def _withdraw(self) -> None:
        if not self.announced or broker_known_gone(self.bus):
            return
        withdrawal = Withdrawal(AGENT_SERVICE, self.announcement.instance)
        try:
            with anyio.fail_after(5):
                await self.bus.publish(AGENT_ANNOUNCEMENTS_QUEUE, messages.encode(withdrawal))
        except Exception as exc:  # askers stop believing it when its TTL runs out
            log.info("could not withdraw the agent service's announcement: %s", exc)


async def agent_service_answers(bus: Bus, request_queue: str, timeout: float) -> bool:
    """Whether an agent service says within ``timeout`` seconds that it serves ``request_queue``."""
    heard = await bus.subscribe(AGENT_ANNOUNCEMENTS_QUEUE)
    try:
        await bus.publish(AGENT_PROBE_QUEUE, messages.encode(Probe()))
        with anyio.move_on_after(timeout):
            async for delivery in heard:
                await delivery.ack()
                if _serves(delivery.body, request_queue):
                    return True
        return False
    finally:
        with anyio.CancelScope(shield=True):
            await heard.close()


def _serves(body: bytes, request_queue: str) -> bool:
    try:
        message: Any = messages.decode(body)
    except ValueError:
        return False
    return (
        isinstance(message, Announcement)
        and message.descriptor.get("request-queue") == request_queue
        and message.ttl > 0
    )


__all__ = [
    "AGENT_ANNOUNCEMENTS_QUEUE",
    "AGENT_NAME",
    "AGENT_PROBE_QUEUE",
    "AgentPresence",
    "AgentProfile",
    "ProfileTool",
    "agent_service_answers",
]
