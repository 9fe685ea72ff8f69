"""The redis-server the Redis state store tests run against: Debian's, as our own process."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import LOOPBACK, free_port, server_process


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found is None:
        pytest.skip("the Redis state store tests need redis-server: apt-get install redis-server")
    return found


@dataclass
class RedisServer:
    """A redis-server on a free loopback port that a test may stop and start again.

    Its data is appended to a file in ``workdir`` (and written out when it stops),
    so a server started again holds what it held.
    """

    workdir: Path
    port: int = field(default_factory=free_port)
    password: str | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}"

    def argv(self) -> list[str]:
        argv = [
            redis_server_binary(),
            "--bind", LOOPBACK,
            "--port", str(self.port),
            "--dir", str(self.workdir),
            "--save", "",
            "--appendonly", "yes",
            "--daemonize", "no",
        ]  # fmt: skip
        if self.password:
            argv += ["--requirepass", self.password]
        return argv

    def running(self) -> Any:
        """Run the server for the duration of a ``with`` block."""
        return server_process(self.argv(), port=self.port, workdir=self.workdir)
