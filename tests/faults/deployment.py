"""What runs on each broker of the fault matrix: the toolbus processes a fault must not end.

* ``toolbus serve`` with the two echo services (:mod:`tests.faults.tools`),
  announcing them every second (so that announcements fall due during every
  outage) and serving ``/metrics`` and ``/readyz``;
* ``toolbus gateway --live``: follows the announcements and the config service
  (a config watch), calls through the bus;
* ``toolbus agent serve``: announces itself every second (its heartbeat);
* the test's own :class:`~toolbus.ToolServiceClient`, making the calls.

Every one connects through the broker's proxy. The processes write their
output to log files, which a test reads for tracebacks.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import httpx
from anyio.abc import TaskStatus

from tests.doors.processes import LISTEN, DoorProcess, door_process
from tests.faults.brokers import FaultyBroker
from tests.faults.tools import RUNS_FILE
from tests.support.servers import LOOPBACK

#: The repository root: ``toolbus serve tests.faults.tools:...`` imports from it.
ROOT = Path(__file__).resolve().parents[2]
API_KEY = "faults-api-key-0123456789abcdef"
#: Seconds a gateway call may take before it answers with the call's failure.
GATEWAY_CALL_TIMEOUT = 5.0
#: What ``toolbus serve --metrics-port 0`` says once it serves its metrics; the group is
#: the port the system chose.
METRICS_AT = re.compile(r"metrics on http://[^\s/]+:(\d+)/metrics")


@dataclass
class Logged:
    """A process's log, read from where the current fault began."""

    process: DoorProcess
    offset: int = 0

    def mark(self) -> None:
        self.offset = len(self.process.output())

    def since_mark(self) -> str:
        return self.process.output()[self.offset :]

    @property
    def alive(self) -> bool:
        return self.process.process.returncode is None


@dataclass
class BrokerDeployment:
    """The processes of one broker's matrix; see the module docs."""

    broker: FaultyBroker
    workdir: Path
    processes: dict[str, Logged] = field(default_factory=dict)
    gateway_port: int = 0
    metrics_port: int = 0
    #: The next call number a load may start from (loads never share numbers).
    next_n: int = 1

    @property
    def runs(self) -> Path:
        return self.workdir / "runs.txt"

    def numbers(self, count: int = 1_000_000) -> int:
        first, self.next_n = self.next_n, self.next_n + count
        return first

    def mark(self) -> None:
        for logged in self.processes.values():
            logged.mark()

    def gateway(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            base_url=f"http://{LOOPBACK}:{self.gateway_port}",
            headers={"Authorization": f"Bearer {API_KEY}"},
            timeout=GATEWAY_CALL_TIMEOUT * 3,
        )


def _settings(broker_url: str) -> str:
    return (
        f"broker = {json.dumps(broker_url)}\n\n"
        "[permissions]\nfallback = []\n\n"
        '[permissions.users]\nfaults = ["*"]\n\n'
        '[[credentials.api-keys]]\nuser = "faults"\nenv = "FAULTS_API_KEY"\n\n'
        f"[gateway]\ncall-timeout = {GATEWAY_CALL_TIMEOUT}\n"
    )


@asynccontextmanager
async def deployed(broker: FaultyBroker, workdir: Path) -> AsyncIterator[BrokerDeployment]:
    """The matrix's processes on ``broker``, each ready, for the block."""
    await anyio.Path(workdir).mkdir(parents=True, exist_ok=True)
    await anyio.Path(workdir / "toolbus.toml").write_text(_settings(broker.url))
    deployment = BrokerDeployment(broker, workdir)
    environment = {
        "PYTHONPATH": str(ROOT),
        RUNS_FILE: str(deployment.runs),
        "FAULTS_API_KEY": API_KEY,
    }
    commands = {
        "serve": (
            [
                "serve", "tests.faults.tools:persistent_echo", "tests.faults.tools:volatile_echo",
                "--announce-interval", "1", "--metrics-port", "0",
            ],
            "event loop:",
            False,
        ),
        # Ports the system chooses, which the processes name: no other process takes them.
        "gateway": (["gateway", "--live", *LISTEN], None, True),
        "agent": (["agent", "serve", "--llm", "scripted://demo"], "serving agent", False),
    }  # fmt: skip
    done = anyio.Event()

    async def run(name: str, *, task_status: TaskStatus[None]) -> None:
        args, ready, http = commands[name]
        async with door_process(
            args, cwd=workdir, environment=environment, ready=ready, http=http, timeout=90
        ) as process:
            deployment.processes[name] = Logged(process)
            if http:
                deployment.gateway_port = process.port
            elif name == "serve":
                said = METRICS_AT.search(process.output())
                assert said is not None, process.output()
                deployment.metrics_port = int(said.group(1))
            task_status.started()
            await done.wait()

    # Started side by side: each is a Python process that takes seconds to start.
    async with anyio.create_task_group() as processes:
        async with anyio.create_task_group() as starting:
            for name in commands:
                starting.start_soon(processes.start, run, name)
        try:
            yield deployment
        finally:
            done.set()
