"""How the suite drives a door: :class:`DoorDriver` (one per door, over its real
transport), who calls (:class:`DoorCaller`) and what the door answered (:class:`DoorAnswer`)."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from toolbus.application.agent.audit import AuditRecord
from toolbus.testing.doors.deployment import DoorSetup

#: How a door answered, as the suite compares answers.
Outcome = Literal["ok", "refused", "denied", "limited", "error"]


@dataclass(frozen=True)
class DoorCaller:
    """Who calls, with which groups (``None``: none named) and in which state (``None``: none)."""

    user: str
    groups: tuple[str, ...] | None = None
    state: str | None = None


@dataclass(frozen=True)
class DoorAnswer:
    """What a door answered, as the suite compares it.

    ``wire`` is the answer exactly as the caller received it (an HTTP status
    and body, an MCP result, an agent event), with the tool's name replaced by
    ``{tool}``: two refusals that must not be told apart have equal ``wire``.
    """

    outcome: Outcome
    text: str = ""
    wire: str = ""
    tools: tuple[str, ...] = ()


def normalized(wire: str, tool: str) -> str:
    """``wire`` with every mention of ``tool`` replaced by ``{tool}``."""
    return re.sub(re.escape(tool), "{tool}", wire)


class DoorSession(ABC):
    """A conversation a door holds for its caller: calls in it keep the state they reach."""

    @abstractmethod
    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer: ...

    @abstractmethod
    async def close(self) -> None: ...


class Occupied(ABC):
    """One of a user's limited places at a door (a held session, a workflow, a request)."""

    @abstractmethod
    async def alive(self) -> bool:
        """Whether the place still works for its holder."""

    @abstractmethod
    async def release(self) -> None: ...


class DoorDriver(ABC):
    """What the suite needs of a door; bindings implement it over the door's real transport."""

    #: The door's name, for messages.
    name: str = "door"

    def __init__(self, setup: DoorSetup) -> None:
        self.setup = setup

    @abstractmethod
    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        """The tools offered to ``caller`` (``DoorAnswer.tools``), or the refusal."""

    @abstractmethod
    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        """Call ``tool`` once for ``caller``, outside any held session."""

    @abstractmethod
    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        """Open a session the door holds for ``caller``, or the refusal."""

    async def occupy(self, caller: DoorCaller) -> Occupied | DoorAnswer:
        """Take one of ``caller``'s limited places; by default, an open session."""
        opened = await self.session(caller)
        if isinstance(opened, DoorAnswer):
            return opened
        return _OpenSession(opened)

    async def stream(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer | None:
        """Call ``tool``, its streamed answer joined; ``None`` if the door has no streams."""
        return None

    def audit(self, user: str) -> list[AuditRecord]:
        """The audit records of ``user``'s sessions at this door."""
        return self.setup.audit(user)


class _OpenSession(Occupied):
    def __init__(self, session: DoorSession) -> None:
        self._session = session

    async def alive(self) -> bool:
        answer = await self._session.call("lookup")
        return answer.outcome == "ok"

    async def release(self) -> None:
        await self._session.close()
