"""The A2A door: ``toolbus a2a serve`` (a process) in front of ``toolbus agent serve``, spoken
to by a2a-sdk's client over HTTP.

Each caller authenticates with its API key; the groups and state it asks for ride in the
message's ``toolbus`` metadata. As for the agent service, the model is the scripted model
server: before each message the driver plays a script that calls the tool the case
names, and reads the answer from the A2A task: the observation among the steps of its
history (or of its stream), or the reason it was rejected. A session is an A2A context:
each message names the ``contextId`` of the first, and the door continues the
conversation in the state it earned.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
from a2a.client import Client, ClientConfig, create_client
from a2a.types import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tests.doors.agent_driver import ERRORS, calling
from tests.doors.processes import LISTEN, door_process
from tests.support.model_server import ModelServer
from toolbus.testing.doors import (
    DoorAnswer,
    DoorCaller,
    DoorDriver,
    DoorSession,
    DoorSetup,
    Occupied,
    api_key,
)

#: States a task leaves no more.
ENDED = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)


def _toolbus(message: Message) -> dict[str, Any]:
    found: dict[str, Any] = MessageToDict(message.metadata).get("toolbus", {})
    return found


def _answer(steps: Iterable[Message], task: Task) -> DoorAnswer:
    """The observation of the call the script made, or why the task was refused."""
    for step in steps:
        said = _toolbus(step)
        if said.get("event") == "observation":
            text = step.parts[0].text
            status = str(said.get("status"))
            outcome = {"ok": "ok", "refused": "refused"}.get(status, "error")
            wire = json.dumps(
                {"status": status, "content": text, "tool": said.get("tool")}, sort_keys=True
            )
            return DoorAnswer(outcome, text, wire)  # type: ignore[arg-type]
    status = task.status
    if status.state in (TaskState.TASK_STATE_REJECTED, TaskState.TASK_STATE_FAILED):
        kind = str(_toolbus(status.message).get("error", ""))
        text = status.message.parts[0].text if status.message.parts else ""
        return DoorAnswer(ERRORS.get(kind, "error"), text, kind)  # type: ignore[arg-type]
    answer = "".join(p.text for a in task.artifacts for p in a.parts)
    return DoorAnswer("ok", answer, answer)


def _agent_steps(task: Task) -> list[Message]:
    return [m for m in task.history if m.role == Role.ROLE_AGENT]


class A2ADriver(DoorDriver):
    name = "a2a"

    def __init__(self, setup: DoorSetup, model: ModelServer, url: str) -> None:
        super().__init__(setup)
        self.model = model
        self.url = url
        self._lock = anyio.Lock()

    @asynccontextmanager
    async def client(
        self, user: str, *, binding: str = "JSONRPC", streaming: bool = False
    ) -> AsyncIterator[Client]:
        headers = {"Authorization": f"Bearer {api_key(user)}"}
        async with httpx.AsyncClient(headers=headers, timeout=90) as http:
            config = ClientConfig(
                httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
            )
            client = await create_client(self.url, client_config=config)
            try:
                yield client
            finally:
                await client.close()

    def request(
        self, caller: DoorCaller, text: str, context_id: str | None = None
    ) -> SendMessageRequest:
        sent = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
        options: dict[str, Any] = {}
        if caller.groups is not None:
            options["groups"] = list(caller.groups)
        if caller.state is not None:
            options["state"] = caller.state
        if options:
            sent.metadata.update({"toolbus": options})
        if context_id is not None:
            sent.context_id = context_id
        return SendMessageRequest(message=sent)

    async def ask(
        self, caller: DoorCaller, turns: list[dict[str, Any]], context_id: str | None = None
    ) -> tuple[Task, str]:
        """Play ``turns`` and send a message; the task once it ended, and the question."""
        question = f"case {uuid.uuid4().hex}"
        async with self._lock, self.client(caller.user) as client:  # one script at a time
            self.model.play(turns)
            [response] = [
                r async for r in client.send_message(self.request(caller, question, context_id))
            ]
            task = response.task
            if task.status.state not in ENDED:  # waiting for an approval: until it is decided
                await self.until_ended(caller.user, task.id)
                task = await client.get_task(GetTaskRequest(id=task.id))
        return task, question

    async def until_ended(self, user: str, task_id: str) -> None:
        """Follow the task's stream until it ends (at once, for one that ended already)."""
        async with self.client(user, streaming=True) as client:
            try:
                async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
                    if event.HasField("task"):
                        state = event.task.status.state
                    elif event.HasField("status_update"):
                        state = event.status_update.status.state
                    else:
                        continue
                    if state in ENDED:
                        return
            except UnsupportedOperationError:  # it ended before the stream began
                return

    async def tools(self, caller: DoorCaller) -> DoorAnswer:
        task, question = await self.ask(caller, [{"text": "Nothing to do."}])
        answer = _answer([], task)
        if answer.outcome != "ok":
            return answer
        offered = self.model.script.offered(question)
        names = tuple(sorted(offered[0])) if offered else ()
        return DoorAnswer("ok", ", ".join(names), json.dumps(names), names)

    async def call(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        task, _ = await self.ask(caller, calling(tool, arguments))
        return _answer(_agent_steps(task), task)

    async def stream(
        self, caller: DoorCaller, tool: str, arguments: Mapping[str, Any] | None = None
    ) -> DoorAnswer:
        """``SendStreamingMessage`` over HTTP+JSON: the steps as the stream carried them."""
        question = f"case {uuid.uuid4().hex}"
        async with (
            self._lock,
            self.client(caller.user, binding="HTTP+JSON", streaming=True) as client,
        ):
            self.model.play(calling(tool, arguments))
            seen: list[StreamResponse] = [
                r async for r in client.send_message(self.request(caller, question))
            ]
            task = await client.get_task(GetTaskRequest(id=seen[0].task.id))
        steps = [r.status_update.status.message for r in seen if r.HasField("status_update")]
        return _answer(steps, task)

    async def session(self, caller: DoorCaller) -> DoorSession | DoorAnswer:
        return _A2ASession(self, caller)

    async def occupy(self, caller: DoorCaller) -> Occupied | DoorAnswer:
        shop = self.setup.shop
        async with self._lock, self.client(caller.user) as client:
            self.model.play(calling("hold", {}))
            holding = shop.reached(caller.user, "hold")
            request = self.request(caller, f"hold {uuid.uuid4().hex}")
            request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
            [response] = [r async for r in client.send_message(request)]
            task_id = response.task.id
            # Until the call waits in the service, or the task ended (refused).
            ended = False
            async with anyio.create_task_group() as waiting:

                async def held() -> None:
                    await shop.holding(caller.user, holding + 1, timeout=60)
                    waiting.cancel_scope.cancel()

                async def refused() -> None:
                    nonlocal ended
                    await self.until_ended(caller.user, task_id)
                    ended = True
                    waiting.cancel_scope.cancel()

                waiting.start_soon(held)
                waiting.start_soon(refused)
            if ended:
                task = await client.get_task(GetTaskRequest(id=task_id))
                return _answer([], task)
        return _Running(self, caller.user, task_id)


class _A2ASession(DoorSession):
    """Messages in one A2A context: each continues where the last one left the session."""

    def __init__(self, driver: A2ADriver, caller: DoorCaller) -> None:
        self.driver = driver
        self.caller = caller
        self.context_id: str | None = None

    async def call(self, tool: str, arguments: Mapping[str, Any] | None = None) -> DoorAnswer:
        task, _ = await self.driver.ask(self.caller, calling(tool, arguments), self.context_id)
        self.context_id = task.context_id
        return _answer(_agent_steps(task), task)

    async def close(self) -> None:
        return None


class _Running(Occupied):
    """A task whose agent run waits in the ``hold`` call."""

    def __init__(self, driver: A2ADriver, user: str, task_id: str) -> None:
        self.driver = driver
        self.user = user
        self.task_id = task_id

    async def alive(self) -> bool:
        async with self.driver.client(self.user) as client:
            task = await client.get_task(GetTaskRequest(id=self.task_id))
        return task.status.state == TaskState.TASK_STATE_WORKING

    async def release(self) -> None:
        self.driver.setup.shop.release()
        with anyio.fail_after(60):
            await self.driver.until_ended(self.user, self.task_id)


@asynccontextmanager
async def a2a_door(setup: DoorSetup, model: ModelServer) -> AsyncIterator[A2ADriver]:
    agent = ["agent", "serve", "--llm", model.openai_url(max_retries=0), "--name", "shop"]
    environment = {**setup.environment(), "OPENAI_API_KEY": "scripted-model-key"}
    async with (
        door_process(agent, cwd=setup.directory, environment=environment, ready="serving agent"),
        door_process(
            ["a2a", "serve", *LISTEN], cwd=setup.directory, environment=environment, http=True
        ) as door,
    ):
        yield A2ADriver(setup, model, f"http://127.0.0.1:{door.port}")


__all__ = ["A2ADriver", "a2a_door"]
