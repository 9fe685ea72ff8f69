"""The agent service as a door: ``toolbus ask`` (a process) against ``toolbus agent serve``.

The model is the scripted model server, reached through the real ``openai``
SDK: before each question the driver plays a script that calls the tool the
case names, and reads the answer from ``toolbus ask --json``'s events.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import Process

from tests.doors.processes import TOOLBUS, door_environment, door_process
from tests.support.model_server import ModelServer
from toolbus.testing.doors import (
    DoorAnswer,
    DoorCaller,
    DoorDriver,
    DoorSession,
    DoorSetup,
    Occupied,
)

ERRORS = {
    "access-denied": "denied",
    "state-refused": "denied",
    "too-many-sessions": "limited",
    "budget-spent": "limited",
}


def _events(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.startswith("{")]


def _answer(events: list[dict[str, Any]], stderr: str) -> DoorAnswer:
    """The observation of the call the script made, or the error that ended the request."""
    observations = [e for e in events if e.get("chunk_type") == "observation"]
    if observations:
        event = observations[0]
        status = str(event.get("status"))
        outcome = {"ok": "ok", "refused": "refused"}.get(status, "error")
        wire = json.dumps({k: event.get(k) for k in ("status", "content", "tool")}, sort_keys=True)
        return DoorAnswer(outcome, str(event.get("content", "")), wire)  # type: ignore[arg-type]
    errors = [e for e in events if e.get("chunk_type") == "error"]
    if errors:
        error = errors[-1].get("error") or {}
        kind = str(error.get("type", ""))
        return DoorAnswer(ERRORS.get(kind, "error"), str(errors[-1].get("content", "")), kind)  # type: ignore[arg-type]
    if events:
        return DoorAnswer("ok", str(events[-1].get("content", "")), json.dumps(events[-1]))
    return DoorAnswer("error", stderr, stderr)


class AgentDriver(DoorDriver):
    name = "agent"

    def __init__(self, setup: DoorSetup, model: ModelServer) -> None:
        super().__init__(setup)
        self.model = model
        self._lock = anyio.Lock()

    def _args(self, caller: DoorCaller, question: str, session: str | None = None) -> list[str]:
        args = ["ask", question, "--json", "--timeout", "60", "--user", caller.user]
        for group in caller.groups or ():
            args += ["--group", group]
        if caller.state is not None:
            args += ["--state", caller.state]
        if session is not None:
            args += ["--session", session]
        return args

    async def _start(self, args: list[str]) -> Process:
        return await anyio.open_process(
            [TOOLBUS, *args],
            cwd=self.setup.directory,
            env=door_environment(self.setup.environment()),
        )

    async def _ask(
        self,
        caller: DoorCaller,
        turns: list[dict[str, Any]],
        session: str | None = None,
    ) -> tuple[list[dict[str, Any]], str, str]:
        """Play ``turns`` and ask; (events, stderr, question)."""
        question = f"case {uuid.uuid4().hex}"
        async with self._lock:  # one script plays at a time
            self.model.play(turns)
            result = await anyio.run_process(
                [TOOLBUS, *self._args(caller, question, session)],
                cwd=self.setup.directory,
                env=door_environment(self.setup.environment()),
                check=False,
            )
        return _events(result.stdout.decode()), result.stderr.decode(), question

    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        events, stderr, question = await self._ask(caller, [{"text": "Nothing to do."}])
        answer = _answer(events, stderr)
        if answer.outcome != "ok":
            return answer
        offered = self.model.script.offered(question)
        names = tuple(sorted(offered[0])) if offered else ()
        return DoorAnswer("ok", ", ".join(names), json.dumps(names), names)

    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        events, stderr, _ = await self._ask(caller, calling(tool, arguments))
        return _answer(events, stderr)

    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        return _AgentSession(self, caller)

    async def occupy(self, caller: DoorCaller) -> Occupied | DoorAnswer:
        question = f"hold {uuid.uuid4().hex}"
        async with self._lock:
            self.model.play(calling("hold", {}))
            process = await anyio.open_process(
                [TOOLBUS, *self._args(caller, question)],
                cwd=self.setup.directory,
                env=door_environment(self.setup.environment()),
            )
            holding = self.setup.shop.reached(caller.user, "hold")
            # Until the call waits in the service, or the request ended (refused).
            with anyio.fail_after(60):
                while self.setup.shop.reached(caller.user, "hold") == holding:
                    if process.returncode is not None:
                        break
                    await anyio.sleep(0.05)
        if process.returncode is not None:
            assert process.stdout is not None and process.stderr is not None
            out = (await process.stdout.receive()).decode() if process.stdout else ""
            return _answer(_events(out), "")
        return _InFlight(self.setup, process)


def calling(tool: str, arguments: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """A script: the model calls ``tool`` with ``arguments``, then answers."""
    return [
        {"text": "Calling.", "calls": [{"name": tool, "arguments": dict(arguments or {})}]},
        {"text": "Done."},
    ]


class _AgentSession(DoorSession):
    """Questions that continue one another: each names the session the last one ended."""

    def __init__(self, driver: AgentDriver, caller: DoorCaller) -> None:
        self.driver = driver
        self.caller = caller
        self.held: str | None = None

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer:
        caller = (
            self.caller if self.held is None else DoorCaller(self.caller.user, self.caller.groups)
        )
        events, stderr, _ = await self.driver._ask(caller, calling(tool, arguments), self.held)
        if events and events[-1].get("session"):
            self.held = str(events[-1]["session"])
        return _answer(events, stderr)

    async def close(self) -> None:
        return None


class _InFlight(Occupied):
    def __init__(self, setup: DoorSetup, process: Process) -> None:
        self.setup = setup
        self.process = process

    async def alive(self) -> bool:
        return self.process.returncode is None

    async def release(self) -> None:
        self.setup.shop.release()
        with anyio.move_on_after(60):
            await self.process.wait()
        if self.process.returncode is None:
            self.process.kill()
        await self.process.aclose()


@asynccontextmanager
async def agent_door(
    setup: DoorSetup, model: ModelServer, *extra: str
) -> AsyncIterator[AgentDriver]:
    args = ["agent", "serve", "--llm", model.openai_url(max_retries=0), *extra]
    environment = {**setup.environment(), "OPENAI_API_KEY": "scripted-model-key"}
    async with door_process(
        args, cwd=setup.directory, environment=environment, ready="serving agent"
    ):
        driver = AgentDriver(setup, model)
        driver.setup = setup
        yield driver


__all__ = ["AgentDriver", "agent_door"]
