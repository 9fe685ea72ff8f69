"""Announcing a tool service, so that agents can call it with no configuration at all.

An :class:`Announcer` runs next to a :class:`~toolbus.application.calls.host.ServiceHost`
and publishes the service's descriptor and its tools on
:data:`ANNOUNCEMENTS_QUEUE`: once when it starts, then every ``interval``
seconds, and at once whenever an agent asks on :data:`PROBE_QUEUE` (a new
agent need not wait for the next interval). Each announcement says how long it
lives (``ttl``, three intervals by default); an agent that hears nothing more
drops the service when it runs out, so a crashed service disappears by itself.
Stopping the announcer (graceful shutdown) publishes a withdrawal and agents
drop the service at once.

Start the host first and stop it last::

    async with running(bus, weather), announcing(bus, weather):
        ...

The message format is in :mod:`toolbus.domain.live.announcements`. Publishing
failures are logged and retried at the next interval: announcing never takes
the service down.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol, runtime_checkable

import anyio
from anyio.abc import TaskStatus

from toolbus.application.calls.service import FunctionToolService, ToolService
from toolbus.application.calls.supervision import supervised
from toolbus.application.live.probes import (
    PROBE_COOLDOWN,
    PassingFailures,
    ProbeAnswers,
    publish_or_wait,
    publish_until_stopped,
    subscribe_probes,
)
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import BusClosed
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Announcement, Withdrawal
from toolbus.ports import Bus, broker_known_gone

log = logging.getLogger("toolbus.announcements")

ANNOUNCEMENTS_QUEUE = "non-persistent://toolbus/tools/announcements"
PROBE_QUEUE = "non-persistent://toolbus/tools/probe"
DEFAULT_INTERVAL = 10.0
#: An announcement lives this many intervals: one lost message is no outage.
TTL_INTERVALS = 3
#: How long a withdrawal may take on the way out before we give up on it.
WITHDRAW_TIMEOUT = 5.0


_FRAMEWORK_DOCS = frozenset({ToolService.__doc__, FunctionToolService.__doc__})


@runtime_checkable
class ChangingTools(Protocol):
    """A service whose tools change while it runs (a bridged MCP server's, say).

    Its announcer starts with :meth:`announced_tools` and is handed to
    :meth:`announce_with`, which keeps it to offer the new tools when they change
    (:meth:`Announcer.offer`).
    """

    def announced_tools(self) -> Mapping[str, Mapping[str, Any]]: ...

    def announce_with(self, announcer: Announcer) -> None: ...


def service_tools(service: ToolService) -> dict[str, dict[str, Any]]:
    """The tool a service offers when it names none: one named after the service.

    See :func:`~toolbus.domain.live.announcements.derived_tool`. Its description is
    the first paragraph of the service's docstring (the decorated function's,
    or the subclass's).
    """
    doc = service.__doc__
    description = None if doc in _FRAMEWORK_DOCS else doc
    return {service.id: messages.derived_tool(service.id, description, service.arguments_schema)}


class Announcer:
    """Announces one tool service until stopped, then withdraws it.

    Args:
        bus: where to announce.
        service: the service; its :meth:`~ToolService.descriptor` is announced.
        tools: the tools it offers, by key (descriptors without ``type`` and
            ``service``, which are filled in). Default: one tool named after the
            service, its arguments taken from the service's typed signature.
        interval: seconds between announcements.
        ttl: seconds an agent keeps an announcement; default ``3 * interval``.
        instance: this replica's id; default a fresh random one.
        tool_types: the tool types the descriptors may use (checked at once).
        clock: monotonic seconds, for the probe cool-down.
        probe_cooldown: probes within this many seconds of an announcement
            share the next one (answered after the cool-down), so that a crowd
            of agents starting together costs one announcement, not one each.

    Raises :class:`~toolbus.domain.errors.ConfigError` when the descriptors
    are invalid: better at start-up than silently ignored by every agent.
    """

    def __init__(
        self,
        bus: Bus,
        service: ToolService,
        *,
        tools: Mapping[str, Mapping[str, Any]] | None = None,
        interval: float = DEFAULT_INTERVAL,
        ttl: float | None = None,
        instance: str | None = None,
        tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
        clock: Callable[[], float] = time.monotonic,
        probe_cooldown: float = PROBE_COOLDOWN,
        announcements_queue: str = ANNOUNCEMENTS_QUEUE,
        probe_queue: str = PROBE_QUEUE,
    ) -> None:
        if interval <= 0:
            raise ValueError("interval must be positive")
        self.bus = bus
        self.service = service
        self.interval = interval
        self.announcements_queue = announcements_queue
        self.probe_queue = probe_queue
        self.clock = clock
        offered = messages.announced_tools(
            service.id, tools if tools is not None else service_tools(service)
        )
        self.announcement = Announcement(
            service.id,
            instance or uuid.uuid4().hex,
            service.descriptor(),
            offered,
            ttl if ttl is not None else interval * TTL_INTERVALS,
        )
        self._tool_types = frozenset(tool_types)
        load_registry(self.announcement.snapshot(), tool_types=self._tool_types)
        #: Announcements published so far, for tests and logs.
        self.announced = 0
        self._probes = ProbeAnswers(self.announce, cooldown=probe_cooldown, clock=clock)
        self._stop = anyio.Event()
        self._withdrawn = False
        self._failures = PassingFailures()

    def __repr__(self) -> str:
        return f"<Announcer {self.service.id!r} instance {self.announcement.instance}>"

    def stop(self) -> None:
        """End :meth:`run`, which then withdraws the service."""
        self._stop.set()

    async def announce(self) -> bool:
        """Publish the announcement now; False (logged) when the bus refused it or the
        broker is away. Raises :class:`~toolbus.domain.errors.BusClosed` only when the
        bus was closed."""
        body = messages.encode(self.announcement)
        published = await publish_or_wait(
            lambda: self.bus.publish(self.announcements_queue, body),
            what=f"announce {self.service.id!r}",
            failures=self._failures,
            retry_in=self.interval,
        )
        if not published:
            return False
        self._probes.answered()
        self._withdrawn = False
        self.announced += 1
        return True

    async def offer(self, tools: Mapping[str, Mapping[str, Any]]) -> bool:
        """Announce ``tools`` instead of the tools offered so far, at once.

        For a service whose tools change while it runs (a bridged toolset, say).
        The instance id stays, so agents replace what this instance offered
        rather than seeing a second one. Raises
        :class:`~toolbus.domain.errors.ConfigError` when the descriptors are
        invalid, and then keeps announcing the previous tools.
        """
        current = self.announcement
        offered = messages.announced_tools(self.service.id, tools)
        replacement = Announcement(
            current.service, current.instance, current.descriptor, offered, current.ttl
        )
        load_registry(replacement.snapshot(), tool_types=self._tool_types)
        self.announcement = replacement
        return await self.announce()

    async def withdraw(self) -> bool:
        """Publish the withdrawal now: agents drop this instance at once."""
        withdrawal = Withdrawal(self.service.id, self.announcement.instance)
        if broker_known_gone(self.bus):
            # Waiting out a publish timeout would only hold up the shutdown.
            log.warning(
                "%r: not withdrawn, the broker cannot be reached (agents drop it when its "
                "TTL runs out)",
                self.service.id,
            )
            return False
        try:
            with anyio.fail_after(WITHDRAW_TIMEOUT):
                await self.bus.publish(self.announcements_queue, messages.encode(withdrawal))
        except Exception as exc:
            log.warning(
                "%r: could not withdraw (agents drop it when its TTL runs out): %s",
                self.service.id,
                exc,
            )
            return False
        self._withdrawn = True
        return True

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Announce now and every interval until stopped or cancelled; then withdraw."""
        self._stop = anyio.Event()
        probes = await subscribe_probes(
            self.bus, self.probe_queue, repr(self.service.id), self.interval
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
            log.info("%r: stopped announcing: the bus is closed", self.service.id)
        finally:
            with anyio.CancelScope(shield=True):
                if probes is not None:
                    await probes.close()
                if not self._withdrawn and self.announced:
                    await self.withdraw()


@asynccontextmanager
async def announcing(
    bus: Bus,
    *services: ToolService,
    tools: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    **options: Any,
) -> AsyncIterator[list[Announcer]]:
    """Announce ``services`` for the duration of the block; withdraw them when it ends.

    ``tools`` maps a service id to the tools it offers (see :class:`Announcer`);
    other ``options`` go to every :class:`Announcer`. Yields once every service
    has been announced once.
    """
    announcers = [
        Announcer(bus, service, tools=(tools or {}).get(service.id), **options)
        for service in services
    ]
    async with supervised(
        announcers, lambda announcer: announcer.run, lambda announcer: announcer.stop()
    ):
        yield announcers
