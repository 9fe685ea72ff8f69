"""A replicated deployment for the tests: its toolbus.toml, tools, keys and processes.

The tools are three steps of a workflow (``step-in`` moves a session from
``undefined`` to ``working``, ``work`` stays there, ``step-out`` moves it
back), each counting how often it ran for each argument, so that a test can
tell a call that ran twice (a replay, a hand-over) from one that ran once.
They are served in the test's process by two replicas, each verifying signed
calls with a replay guard in the deployment's state store.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from tests.doors.processes import LISTEN, DoorProcess, door_process
from tests.support.servers import LOOPBACK, free_port, on_free_ports_async
from toolbus.application.calls.host import running
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.application.identity import CallVerifier, generate_key, public_jwk
from toolbus.application.identity.keys import private_jwk
from toolbus.application.identity.replays import StoredReplays
from toolbus.application.sealing import new_seal_jwk
from toolbus.plugins import connect, connect_state

ALICE_KEY = "alice-scaling-key-0123456789abcdef"
GROUPS = ["steps"]

#: The ten calls of a session, and the state each leaves it in.
TEN_CALLS = [
    ("step-in", "working"),
    ("work", "working"),
    ("work", "working"),
    ("step-out", "undefined"),
    ("step-in", "working"),
    ("work", "working"),
    ("step-out", "undefined"),
    ("step-in", "working"),
    ("work", "working"),
    ("step-out", "undefined"),
]


def _toml_value(value: object) -> str:
    return json.dumps(value)


@dataclass
class Deployment:
    """Everything the replicas of one test share; see the module docs."""

    workdir: Path
    broker: str
    state: str
    state_options: Mapping[str, object]
    #: ``[broker-options]`` of the replicas' toolbus.toml.
    broker_options: Mapping[str, object] = field(default_factory=dict)
    #: Tools on persistent queues (at least once, answered from memory when sent again).
    persistent: bool = False
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    runs: Counter[tuple[str, int]] = field(default_factory=Counter)
    #: Set when ``work`` starts a call; ``work`` then waits for :attr:`release` if
    #: :attr:`holding` is set.
    working: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)
    holding: bool = False

    def __post_init__(self) -> None:
        self.key = generate_key("Ed25519", kid=f"gateway-{self.suffix}")
        self.environment = {
            "ALICE_KEY": ALICE_KEY,
            "SIGN_KEY": json.dumps(private_jwk(self.key)),
            # Every replica seals what it keeps in the shared store with the same key.
            "SEAL_KEY": json.dumps(new_seal_jwk(f"seal-{self.suffix}")),
        }
        self.services = [self._step(name) for name in ("step-in", "work", "step-out")]
        self.config = self.workdir / "tools.json"
        self.config.write_text(json.dumps(self.snapshot()))
        options = "\n".join(f"{k} = {_toml_value(v)}" for k, v in self.state_options.items())
        broker_options = "\n".join(
            f"{k} = {_toml_value(v)}" for k, v in self.broker_options.items()
        )
        (self.workdir / "toolbus.toml").write_text(
            f"broker = {_toml_value(self.broker)}\n"
            f"state = {_toml_value(self.state)}\n"
            'seal-keys = ["env:SEAL_KEY"]\n\n'
            f"[state-options]\n{options}\n\n"
            f"[broker-options]\n{broker_options}\n\n"
            "[permissions]\nfallback = []\n\n"
            f"[permissions.users]\nalice = {_toml_value(GROUPS)}\n\n"
            '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n\n'
            '[gateway]\nsign-key = "env:SIGN_KEY"\n'
        )

    def queue(self, name: str) -> str:
        kind = "persistent" if self.persistent else "non-persistent"
        return f"{kind}://tg/request/{name}-{self.suffix}"

    def _step(self, name: str) -> FunctionToolService:
        runs = self.runs
        deployment = self

        @tool_service(
            f"{name}-{self.suffix}",
            request_queue=self.queue(name),
            response_queue=f"non-persistent://tg/response/{name}-{self.suffix}",
        )
        async def step(n: int) -> str:
            runs[(name, n)] += 1
            if name == "work":
                deployment.working.set()
                if deployment.holding:
                    await deployment.release.wait()
            return f"{name} {n}"

        return step

    def snapshot(self) -> dict[str, Any]:
        moves = {"step-in": ("undefined", "working"), "work": ("working", None)}
        moves["step-out"] = ("working", "undefined")
        tools = {}
        for service in self.services:
            name = service.id.removesuffix(f"-{self.suffix}")
            source, target = moves[name]
            tool: dict[str, Any] = {
                "type": "tool-service",
                "name": name,
                "description": f"the {name} step",
                "service": service.id,
                "group": GROUPS,
                "applicable-states": [source],
                "arguments": [{"name": "n", "type": "integer", "description": "which call"}],
            }
            if target is not None:
                tool["state"] = target
            tools[name] = tool
        return {
            "tool-service": {service.id: service.descriptor() for service in self.services},
            "tool": tools,
        }

    @asynccontextmanager
    async def tool_replicas(self, count: int = 2, *, verify: bool = True) -> AsyncIterator[None]:
        """``count`` replicas of the step services, each a process's worth of parts of
        its own (bus, store connection, verifier), on the deployment's broker."""
        async with AsyncExitStack() as stack:
            for _ in range(count):
                bus = await connect(self.broker)
                stack.push_async_callback(bus.close)
                store = await connect_state(self.state, self.state_options)
                stack.push_async_callback(store.close)
                verifier = (
                    CallVerifier([public_jwk(self.key)], replays=StoredReplays(store))
                    if verify
                    else None
                )
                await stack.enter_async_context(running(bus, *self.services, verifier=verifier))
            yield

    @asynccontextmanager
    async def door(self, *args: str) -> AsyncIterator[tuple[DoorProcess, int]]:
        """One replica of a door: ``toolbus ARGS`` on a port the system chooses, ready once
        it says which. Worker processes share one port that must be named: a free one,
        another where it was taken."""
        argv = [*args, "--config", str(self.config)]
        if "--workers" not in args:
            async with self._door([*argv, *LISTEN]) as process:
                yield process, process.port
            return
        port = 0

        def choose() -> None:
            nonlocal port
            port = free_port()

        async with on_free_ports_async(
            lambda: self._door([*argv, "--listen", f"{LOOPBACK}:{port}"]), choose
        ) as process:
            yield process, process.port

    def _door(self, argv: list[str]) -> AbstractAsyncContextManager[DoorProcess]:
        environment = self.environment
        return door_process(argv, cwd=self.workdir, environment=environment, http=True, timeout=90)
