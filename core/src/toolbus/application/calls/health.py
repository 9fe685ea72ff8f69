"""Is this process ready to take calls? What ``/readyz`` answers for ``toolbus serve``.

Ready means: the bus does not know its broker to be gone, and every service
host is subscribed to its request queue and not stopping. Liveness
(``/healthz``) needs nothing more than an answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from toolbus.application.calls.service import ToolService
from toolbus.ports import Bus, broker_known_gone


class Hosting(Protocol):
    """What readiness reads of a :class:`~toolbus.application.calls.host.ServiceHost`."""

    @property
    def service(self) -> ToolService: ...

    @property
    def state(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Readiness:
    """Whether the process is ready, and each check's verdict ("ok" or why not)."""

    ready: bool
    checks: dict[str, str] = field(default_factory=dict)


class ServingHealth:
    """The readiness of one process's services; handed the bus and hosts once they exist.

    Called from the metrics server's thread: it only reads flags the event loop sets.
    """

    def __init__(self) -> None:
        self._bus: Bus | None = None
        self._hosts: Sequence[Hosting] = ()

    def attach(self, bus: Bus, hosts: Sequence[Hosting]) -> None:
        self._bus = bus
        self._hosts = tuple(hosts)

    def __call__(self) -> Readiness:
        if self._bus is None:
            return Readiness(False, {"broker": "not connected yet"})
        checks = {"broker": "unreachable" if broker_known_gone(self._bus) else "ok"}
        for host in self._hosts:
            checks[f"service {host.service.id}"] = host.state
        return Readiness(all(verdict == "ok" for verdict in checks.values()), checks)
