"""The agent services an A2A door serves: :class:`AgentDirectory`.

Agent services say on the bus that they answer (``toolbus agent serve``'s
:class:`~toolbus.application.live.agent_presence.AgentPresence`), with a
profile: a name, a description, and the tools they may use by group. The
directory asks them to announce at once when it starts, then keeps what it
hears: an agent appears when it first announces, and leaves when it withdraws
or its announcements stop (their time to live runs out). Replicas of one agent
announce the same name and queues: the directory keeps one agent per name.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import ValidationError

from toolbus.application.live.agent_presence import (
    AGENT_ANNOUNCEMENTS_QUEUE,
    AGENT_PROBE_QUEUE,
    AGENT_SERVICE,
    AgentProfile,
)
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import (
    Announcement,
    AnnouncementTable,
    Probe,
    Withdrawal,
)
from toolbus.ports import Bus

log = logging.getLogger("toolbus.a2a")

#: What an agent's name may be to serve it under ``/agents/{name}``.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True, slots=True)
class ServedAgent:
    """One agent service as the door serves it: its profile and where it answers."""

    profile: AgentProfile
    request_queue: str
    response_queue: str

    @property
    def name(self) -> str:
        return self.profile.name


def served_agent(descriptor: Any) -> ServedAgent | None:
    """The agent an announcement's descriptor describes; ``None`` for one that is not an
    agent service's, or whose name cannot be part of a URL path."""
    if not isinstance(descriptor, dict) and not hasattr(descriptor, "get"):
        return None
    request_queue = descriptor.get("request-queue")
    response_queue = descriptor.get("response-queue")
    if not isinstance(request_queue, str) or not isinstance(response_queue, str):
        return None
    try:
        profile = AgentProfile.model_validate(descriptor.get("profile") or {})
    except ValidationError:
        return None
    if not NAME.match(profile.name):
        log.warning(
            "agent %r cannot be served over A2A: its name must be letters, digits, '.', '_' "
            "or '-' (toolbus agent serve --name)",
            profile.name,
        )
        return None
    return ServedAgent(profile, request_queue, response_queue)


class AgentDirectory:
    """The agents on the bus the door serves, as they announce themselves.

    Args:
        bus: where agents announce.
        only: serve only the agents of these names (default: every agent).
        clock: seconds, for announcements' time to live.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        only: Collection[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.bus = bus
        self.only = frozenset(only)
        self.clock = clock
        self._table = AnnouncementTable()
        self._changed = anyio.Event()

    def agents(self) -> dict[str, ServedAgent]:
        """The agents announced now, by name."""
        self._table.expire(self.clock())
        found = {}
        for announcement in self._table.current():
            agent = served_agent(announcement.descriptor)
            if agent is not None:
                found[agent.name] = agent
        return found

    def get(self, name: str) -> ServedAgent | None:
        return self.agents().get(name)

    async def wait_for(self, count: int, timeout: float) -> dict[str, ServedAgent]:
        """The agents announced once at least ``count`` are, or ``timeout`` seconds passed."""
        with anyio.move_on_after(timeout):
            while len(found := self.agents()) < count:
                self._changed = anyio.Event()
                await self._changed.wait()
            return found
        return self.agents()

    async def wait_for_name(self, name: str, timeout: float) -> ServedAgent | None:
        """Agent ``name`` once it is announced; ``None`` when ``timeout`` seconds came first."""
        with anyio.move_on_after(timeout):
            while (agent := self.get(name)) is None:
                self._changed = anyio.Event()
                await self._changed.wait()
            return agent
        return None

    def hear(self, body: bytes) -> None:
        """Take in one message of the announcements queue."""
        try:
            message: Any = messages.decode(body)
        except ValueError:
            return
        if isinstance(message, Announcement) and message.service == AGENT_SERVICE:
            agent = served_agent(dict(message.descriptor))
            if agent is None or (self.only and agent.name not in self.only):
                return
            # Keyed by the agent's name: replicas of one agent are one agent.
            keyed = Announcement(agent.name, message.instance, message.descriptor, ttl=message.ttl)
            if self._table.receive(keyed, self.clock()):
                log.info("agent %s answers on %s", agent.name, agent.request_queue)
            self._changed.set()
        elif isinstance(message, Withdrawal) and message.service == AGENT_SERVICE:
            for name in self._table.services():
                if self._table.withdraw(Withdrawal(name, message.instance)):
                    log.info("agent %s withdrew", name)
            self._changed.set()

    async def follow(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Hear announcements until cancelled; asks every agent to announce once listening."""
        heard = await self.bus.subscribe(AGENT_ANNOUNCEMENTS_QUEUE)
        try:
            await self.bus.publish(AGENT_PROBE_QUEUE, messages.encode(Probe()))
            task_status.started()
            async for delivery in heard:
                await delivery.ack()
                self.hear(delivery.body)
        finally:
            with anyio.CancelScope(shield=True):
                await heard.close()
