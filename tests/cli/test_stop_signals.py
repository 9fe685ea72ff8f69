"""Every long-running command stops on SIGTERM and SIGINT: it says so, drains, and exits 0.

Each command runs as a real process and gets a real signal once it says it is
ready (as a supervisor, or a person pressing Ctrl-C, would send it), with
whatever would hold up a careless stop: an MCP client still connected over
stdio, an event stream open on the gateway. docs/cli.md's exit-code table
promises 0 for a clean stop; a process that dies by the signal exits 143 or 130.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.doors.processes import LISTEN, serving_port
from tests.mcp.support import MEMORY_SERVER, REPOSITORY

pytestmark = pytest.mark.slow

TOOLBUS = str(Path(sys.executable).with_name("toolbus"))
STARTUP = 60.0  # seconds a fresh interpreter may take to import and start, under load
#: Nothing is in flight in these tests: a stop that takes longer is one that hangs.
STOP_WITHIN = 20.0
SIGNALS = pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"]
)
API_KEY = "alice-key-0123456789abcdef"


class Running:
    """A ``toolbus`` command as a process, its stderr read line by line as it comes."""

    def __init__(self, args: list[str], cwd: Path, stdin: int = subprocess.DEVNULL) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
        env["ALICE_KEY"] = API_KEY
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [TOOLBUS, *args],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_for(self, text: str) -> None:
        """Return once stderr has a line holding ``text``."""
        while not any(text in line for line in self.seen):
            try:
                line = self.lines.get(timeout=STARTUP)
            except queue.Empty:
                pytest.fail(f"no line with {text!r} within {STARTUP} s: {self.seen}")
            if line is None:
                pytest.fail(f"the process ended before printing {text!r}: {self.seen}")
            self.seen.append(line)

    def stop(self, signum: signal.Signals) -> int:
        """Send ``signum``; the exit code, once the process has ended (it must, soon)."""
        self.process.send_signal(signum)
        try:
            code = self.process.wait(STOP_WITHIN)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {STOP_WITHIN} s after {signum.name}: {self.seen}")
        self.wait_for(f"{signum.name}: ")  # it said what it was doing
        return code

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                stream.close()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[list[Running]]:
    started: list[Running] = []
    yield started
    for process in started:
        process.close()


def start(started: list[Running], cwd: Path, *args: str, **options: int) -> Running:
    process = Running(list(args), cwd, **options)
    started.append(process)
    return process


@SIGNALS
def test_agent_serve(running: list[Running], tmp_path: Path, signum: signal.Signals) -> None:
    agent = start(running, tmp_path, "agent", "serve", "--llm", "scripted://demo")
    agent.wait_for("event loop:")

    assert agent.stop(signum) == 0


@SIGNALS
def test_serve_config(running: list[Running], tmp_path: Path, signum: signal.Signals) -> None:
    config = start(running, tmp_path, "serve", "config", "--store", "store.json")
    config.wait_for("event loop:")

    assert config.stop(signum) == 0


@SIGNALS
def test_serve_openapi(running: list[Running], tmp_path: Path, signum: signal.Signals) -> None:
    spec = REPOSITORY / "tests" / "data" / "openapi" / "petstore.yaml"
    toolset = start(
        running, tmp_path, "serve", "openapi", "--toolset", "pets", "--spec", str(spec),
        "--base-url", "http://127.0.0.1:9/api",
    )  # fmt: skip
    toolset.wait_for("event loop:")

    assert toolset.stop(signum) == 0


@SIGNALS
def test_serve_mcp(running: list[Running], tmp_path: Path, signum: signal.Signals) -> None:
    bridge = start(
        running, tmp_path, "serve", "mcp", "--toolset", "memory", "--command",
        " ".join(MEMORY_SERVER), "--env", "PYTHONPATH",
    )  # fmt: skip
    bridge.wait_for("event loop:")

    assert bridge.stop(signum) == 0
    assert any("SIGNAL: draining calls in flight".replace("SIGNAL", signum.name) in line
               for line in bridge.seen)  # fmt: skip


@SIGNALS
def test_mcp_serve_over_stdio_with_its_client_connected(
    running: list[Running], tmp_path: Path, signum: signal.Signals
) -> None:
    server = start(running, tmp_path, "mcp", "serve", stdin=subprocess.PIPE)
    server.wait_for("serving MCP on stdio")
    assert server.process.stdin is not None and server.process.stdout is not None
    initialize = {
        "jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}},
    }  # fmt: skip
    server.process.stdin.write(json.dumps(initialize) + "\n")
    server.process.stdin.flush()
    assert json.loads(server.process.stdout.readline())["id"] == 1
    # The client stays connected and writes nothing more: reading stdin must not hold
    # up the stop.

    assert server.stop(signum) == 0


#: An API key and permissions: a door on the network refuses to start without both.
NETWORK_DOOR_SETTINGS = (
    '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n\n'
    '[permissions.users]\nalice = ["default"]\n'
)


@SIGNALS
def test_mcp_serve_over_http(
    running: list[Running], tmp_path: Path, signum: signal.Signals
) -> None:
    (tmp_path / "toolbus.toml").write_text(NETWORK_DOOR_SETTINGS)
    server = start(running, tmp_path, "mcp", "serve", "--transport", "http", *LISTEN)
    server.wait_for("serving MCP on http://")

    assert server.stop(signum) == 0


@SIGNALS
def test_gateway_with_an_event_stream_open(
    running: list[Running], tmp_path: Path, signum: signal.Signals
) -> None:
    (tmp_path / "toolbus.toml").write_text(NETWORK_DOOR_SETTINGS)
    (tmp_path / "config.json").write_text(json.dumps({"tool-service": {}, "tool": {}}))
    gateway = start(running, tmp_path, "gateway", "--config", "config.json", *LISTEN)
    gateway.wait_for("toolbus gateway on")
    base = f"http://127.0.0.1:{serving_port(' '.join(gateway.seen))}/v1"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.Client(headers=headers, timeout=30) as http:
        opened = http.post(f"{base}/sessions", json={"messages": []})
        assert opened.status_code == 201, opened.text
        events = f"{base}/sessions/{opened.json()['session_id']}/events"
        with http.stream("GET", events) as stream:
            assert next(stream.iter_lines()).startswith(("event:", "data:", "id:"))

            assert gateway.stop(signum) == 0
