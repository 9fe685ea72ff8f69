"""Python as a door: ``open_tools`` and ``AgentSession`` in the test's own process."""

from __future__ import annotations

import importlib
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from toolbus import AgentSession, open_tools
from toolbus.application.agent.calling import ToolStream
from toolbus.application.calls.tools import Tools
from toolbus.domain.errors import AccessDenied, LimitReached, ToolCallError
from toolbus.testing.doors import DoorAnswer, DoorCaller, DoorDriver, DoorSession, DoorSetup


def _answer(outcome: Any) -> DoorAnswer:
    status = {"ok": "ok", "refused": "refused"}.get(outcome.status, "error")
    wire = repr((outcome.status, outcome.observation, outcome.refusal, outcome.tool, outcome.name))
    return DoorAnswer(status, outcome.observation, wire)  # type: ignore[arg-type]


def _denied(exc: Exception) -> DoorAnswer:
    outcome = "limited" if isinstance(exc, LimitReached) else "denied"
    return DoorAnswer(outcome, str(exc), f"{type(exc).__name__}: {exc}")  # type: ignore[arg-type]


class PythonDriver(DoorDriver):
    name = "python"

    def __init__(self, setup: DoorSetup, tools: Tools) -> None:
        super().__init__(setup)
        self._tools = tools

    def _session(self, caller: DoorCaller) -> AgentSession:
        return AgentSession(
            self._tools,
            user=caller.user,
            groups=None if caller.groups is None else list(caller.groups),
            state=caller.state,
        )

    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        try:
            session = self._session(caller)
        except (AccessDenied, LimitReached) as exc:
            return _denied(exc)
        async with session:
            names = tuple(sorted(tool.name for tool in session.available))
        return DoorAnswer("ok", ", ".join(names), repr(names), names)

    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        try:
            session = self._session(caller)
        except (AccessDenied, LimitReached) as exc:
            return _denied(exc)
        async with session:
            return _answer(await session.call(tool, dict(arguments or {})))

    async def stream(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer | None:
        try:
            session = self._session(caller)
        except (AccessDenied, LimitReached) as exc:
            return _denied(exc)
        async with session:
            prepared = await session.stream(tool, dict(arguments or {}))
            if not isinstance(prepared, ToolStream):
                return _answer(prepared)
            try:
                chunks = [chunk async for chunk in prepared]
            except ToolCallError as exc:
                return DoorAnswer("error", exc.message, repr(exc))
        text = "".join(chunks)
        return DoorAnswer("ok", text, repr(chunks))

    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        try:
            return _PythonSession(self._session(caller))
        except (AccessDenied, LimitReached) as exc:
            return _denied(exc)


class _PythonSession(DoorSession):
    def __init__(self, session: AgentSession) -> None:
        self.session = session

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer:
        return _answer(await self.session.call(tool, dict(arguments or {})))

    async def close(self) -> None:
        await self.session.close()


@asynccontextmanager
async def python_door(setup: DoorSetup) -> AsyncIterator[PythonDriver]:
    # The suite's code hooks are an installed plugin: put its site on this process's path.
    sys.path.insert(0, str(setup.site))
    importlib.invalidate_caches()
    try:
        async with open_tools(
            setup.broker, setup.config_file, settings=setup.settings_file
        ) as tools:
            yield PythonDriver(setup, tools)
    finally:
        sys.path.remove(str(setup.site))
        importlib.invalidate_caches()
