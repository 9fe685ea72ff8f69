"""What the A2A tests share: a nats-server, processes whose readiness shows in their log, and
a site for ``toolbus a2a serve`` (its toolbus.toml, an agent's tools served by the test)."""

from __future__ import annotations

import itertools
import json
import re
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.types import (
    AgentCard,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
)
from anyio.abc import Process

from tests.doors.processes import LISTEN, DoorProcess, door_environment, door_process
from tests.support.model_server import ModelServer
from toolbus.application.calls.asking import ask
from toolbus.application.calls.host import running as serving
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.application.sealing import new_seal_jwk
from toolbus.domain.calls.input_requests import Elicitation
from toolbus.plugins import connect


@pytest.fixture(scope="session")
def a2a_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from tests.nats.server import NatsServer

    server = NatsServer(tmp_path_factory.mktemp("a2a-nats"))
    with server.running():
        yield server.url


_LOGS = itertools.count()


@asynccontextmanager
async def running(
    argv: list[str], ready: str, *, cwd: Path, env: dict[str, str] | None = None
) -> AsyncIterator[tuple[Process, re.Match[str], Path]]:
    """Run ``argv`` until the block ends; yield once its output matches ``ready`` (a regex):
    the process, the match, and its log."""
    log = cwd / f"{Path(argv[0]).name}-{next(_LOGS)}.log"
    handle = log.open("ab")
    process = await anyio.open_process(
        argv, cwd=cwd, env=door_environment(env or {}), stdout=handle, stderr=handle
    )
    try:
        with anyio.fail_after(60):
            while (found := re.search(ready, log.read_text(errors="replace"))) is None:
                if process.returncode is not None:
                    raise AssertionError(f"{argv} exited early:\n{log.read_text()[-4000:]}")
                # A foreign process tells readiness only by its log.
                await anyio.sleep(0.05)
        yield process, found, log
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with anyio.CancelScope(shield=True):
                    await process.wait()
        handle.close()


#: Runs the remote agent: ``[*REMOTE_AGENT, PORT, TOKEN]``.
REMOTE_AGENT = [sys.executable, "-m", "tests.a2a.remote_agent"]
ROOT = Path(__file__).parent.parent.parent

#: The API keys of the site's users.
KEYS = {user: f"a2a-{user}-key-0123456789" for user in ("alice", "bob", "ops")}
#: The form the ``ship`` tool asks its caller to fill in.
SURE = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
#: The agent's name and description (``toolbus agent serve --name --description``).
AGENT, DESCRIPTION = "helper", "Answers questions about orders."


@dataclass
class A2ASite:
    """A directory to run ``toolbus agent serve`` and ``toolbus a2a serve`` in.

    Its toolbus.toml: the broker, the shared sealed ``state`` (when given), users
    alice, bob and ops with API keys, approvals by ops for ``refund``. The agent's
    tools are served by the test (:meth:`tools`): ``hold`` waits until the test
    lets its ``key`` go (:meth:`let_go`), ``refund`` answers at once (once approved),
    ``ship`` asks its caller whether to (a form with one yes-or-no field, ``sure``;
    :meth:`reached` ``KEY-ACTION`` once it has the answer);
    each answer names the user the call was made for.
    """

    directory: Path
    broker: str
    state: str | None = None
    #: More of toolbus.toml (tables), after the rest.
    extra: str = ""
    #: More of its ``[tasks]`` table (lines).
    tasks: str = ""
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    held: dict[str, anyio.Event] = field(default_factory=dict)
    arrived: dict[str, anyio.Event] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.environment = {
            **{f"A2A_KEY_{user.upper()}": key for user, key in KEYS.items()},
            "SEAL_KEY": json.dumps(new_seal_jwk(f"seal-{self.suffix}")),
            "OPENAI_API_KEY": "scripted-model-key",
        }
        keys = "".join(
            f'[[credentials.api-keys]]\nuser = "{user}"\nenv = "A2A_KEY_{user.upper()}"\n\n'
            for user in KEYS
        )
        state = (
            ""
            if self.state is None
            else f'state = {json.dumps(self.state)}\nseal-keys = ["env:SEAL_KEY"]\n'
        )
        (self.directory / "toolbus.toml").write_text(
            f"broker = {json.dumps(self.broker)}\n{state}\n"
            "[permissions]\nfallback = []\n\n"
            '[permissions.users]\nalice = ["default"]\nbob = ["default"]\nops = ["*"]\n\n'
            '[approvals]\napprovers = ["ops"]\ntools = ["refund"]\ntimeout = 120\n\n'
            f"[tasks]\nlease = 2\n{self.tasks}\n" + keys + self.extra,
            encoding="utf-8",
        )
        self.service = self._desk()
        (self.directory / "config.json").write_text(json.dumps(self.snapshot()))

    def _desk(self) -> FunctionToolService:
        site = self

        @tool_service(
            f"desk-{self.suffix}",
            request_queue=f"non-persistent://a2a-tests/request/desk-{self.suffix}",
            response_queue=f"non-persistent://a2a-tests/response/desk-{self.suffix}",
            config_params=[{"name": "action", "required": True}],
        )
        async def desk(user: str, config: dict[str, Any], key: str = "") -> str:
            if config["action"] == "ship":
                answer = await ask(Elicitation(f"Ship {key}?", SURE))
                site.arrival(f"{key}-{answer.action}").set()
                if answer.accepted and answer.content.get("sure"):
                    return f"shipped {key} for {user}"
                return f"kept {key} ({answer.action})"
            if config["action"] == "hold":
                site.arrival(key).set()
                await site.held.setdefault(key, anyio.Event()).wait()
                return f"held {key} for {user}"
            return f"refunded {key} for {user}"

        return desk

    def snapshot(self) -> dict[str, Any]:
        def tool(name: str) -> dict[str, Any]:
            return {
                "type": "tool-service",
                "name": name,
                "description": f"The desk's {name} tool",
                "service": self.service.id,
                "action": name,
                "arguments": [{"name": "key", "type": "string", "description": "Which one"}],
            }

        return {
            "tool-service": {self.service.id: self.service.descriptor()},
            "tool": {name: tool(name) for name in ("hold", "refund", "ship")},
        }

    def arrival(self, key: str) -> anyio.Event:
        return self.arrived.setdefault(key, anyio.Event())

    async def reached(self, key: str) -> None:
        """Until a ``hold`` call of ``key`` waits in the service."""
        with anyio.fail_after(60):
            await self.arrival(key).wait()

    def let_go(self, key: str) -> None:
        """The ``hold`` call of ``key`` answers (now, or at once when it comes)."""
        self.held.setdefault(key, anyio.Event()).set()

    @asynccontextmanager
    async def tools(self) -> AsyncIterator[None]:
        """The desk's tools, served in this process until the block ends."""
        async with AsyncExitStack() as stack:
            bus = await connect(self.broker)
            stack.push_async_callback(bus.close)
            await stack.enter_async_context(serving(bus, self.service))
            yield

    @asynccontextmanager
    async def agent(self, model: ModelServer) -> AsyncIterator[DoorProcess]:
        args = ["agent", "serve", "--llm", model.openai_url(max_retries=0)]
        args += ["--config", "config.json", "--name", AGENT, "--description", DESCRIPTION]
        async with door_process(
            args, cwd=self.directory, environment=self.environment, ready="serving agent"
        ) as process:
            yield process

    @asynccontextmanager
    async def door(self, *extra: str) -> AsyncIterator[tuple[DoorProcess, str]]:
        """A ``toolbus a2a serve`` replica, ready once it listens: its process and URL."""
        async with door_process(
            ["a2a", "serve", *extra, *LISTEN],
            cwd=self.directory,
            environment=self.environment,
            http=True,
        ) as process:
            yield process, f"http://127.0.0.1:{process.port}"


def calling(tool: str, key: str, answer: str = "Done.") -> list[dict[str, Any]]:
    """A script: the model calls ``tool`` with ``key``, then answers ``answer``."""
    return [
        {"text": f"Calling {tool}.", "calls": [{"name": tool, "arguments": {"key": key}}]},
        {"text": answer},
    ]


def message(text: str, **fields: Any) -> SendMessageRequest:
    """A request sending the caller's message ``text``."""
    sent = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    for name, value in fields.items():
        setattr(sent, name, value)
    return SendMessageRequest(message=sent)


@asynccontextmanager
async def a2a_client(
    url: str | AgentCard, user: str, *, binding: str = "JSONRPC", streaming: bool = False
) -> AsyncIterator[Client]:
    """a2a-sdk's client of the agent whose card is at ``url`` (or of the card given), with
    ``user``'s API key."""
    headers = {"Authorization": f"Bearer {KEYS[user]}"}
    async with httpx.AsyncClient(headers=headers, timeout=90) as http:
        config = ClientConfig(
            httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
        )
        client = await create_client(url, client_config=config)
        try:
            yield client
        finally:
            await client.close()


async def followed(client: Client, task_id: str, then: Any) -> list[StreamResponse]:
    """The task's stream to its end; ``then()`` runs once the stream is live."""
    seen = []
    async for event in client.subscribe(SubscribeToTaskRequest(id=task_id)):
        if not seen:
            await then()
        seen.append(event)
    return seen
