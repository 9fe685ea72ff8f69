"""What runs next to served tool services: announcers, and the config service's publisher.

``toolbus serve`` (and any program hosting services) starts its
:class:`~toolbus.application.calls.host.ServiceHost` objects first, then
:func:`alongside`, and on shutdown leaves :func:`alongside` first (services
withdraw their announcements, so agents stop choosing them) before it stops the
hosts (which drain the calls in flight)::

    async with running(bus, *services):
        async with alongside(bus, services, announce=True):
            await shutdown_requested()
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from anyio.abc import TaskStatus

from toolbus.application.calls.service import ToolService
from toolbus.application.calls.supervision import supervised
from toolbus.application.live.announcements import DEFAULT_INTERVAL, Announcer, ChangingTools
from toolbus.application.live.config_service import ConfigPublisher, ConfigService
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.domain.live.announcements import tools_of
from toolbus.ports import Bus


class Companion(Protocol):
    """Something that runs next to a service until stopped."""

    async def run(self, *, task_status: TaskStatus[None] = ...) -> None: ...

    def stop(self) -> None: ...


def companions_for(
    bus: Bus,
    services: Iterable[ToolService],
    *,
    announce: bool = True,
    interval: float = DEFAULT_INTERVAL,
    defaults: Mapping[str, Any] | None = None,
    tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
) -> list[Announcer | ConfigPublisher]:
    """A publisher for each config service and, with ``announce``, an announcer for each other.

    ``defaults`` is a snapshot (the installed plugins' default configuration)
    whose tools a service announces as its own; a service with none there
    announces the tool derived from its signature, and a service whose tools
    change while it runs (:class:`ChangingTools`) announces its own and keeps its
    announcer. The config service is never announced: it is not a tool for an LLM.
    """
    types = frozenset(tool_types)
    companions: list[Announcer | ConfigPublisher] = []
    for service in services:
        if isinstance(service, ConfigService):
            companions.append(ConfigPublisher(bus, service))
        elif announce and isinstance(service, ChangingTools):
            announcer = Announcer(
                bus, service, tools=service.announced_tools(), interval=interval, tool_types=types
            )
            service.announce_with(announcer)
            companions.append(announcer)
        elif announce:
            tools = tools_of(service.id, defaults or {}) or None
            companions.append(
                Announcer(bus, service, tools=tools, interval=interval, tool_types=types)
            )
    return companions


@asynccontextmanager
async def alongside(
    bus: Bus,
    services: Iterable[ToolService],
    *,
    announce: bool = True,
    interval: float = DEFAULT_INTERVAL,
    defaults: Mapping[str, Any] | None = None,
    tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
) -> AsyncIterator[list[Announcer | ConfigPublisher]]:
    """Run :func:`companions_for` ``services`` for the duration of the block.

    Yields once each has started (every announcer has announced once); when the
    block ends, announcers withdraw before this returns.
    """
    companions = companions_for(
        bus,
        services,
        announce=announce,
        interval=interval,
        defaults=defaults,
        tool_types=tool_types,
    )
    async with supervised(
        companions, lambda companion: companion.run, lambda companion: companion.stop()
    ):
        yield companions
