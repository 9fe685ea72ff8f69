"""The redis-server the Redis state store tests run against: Debian's, as our own process."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.real_parts import missing
from tests.support.servers import LOOPBACK, chosen, free_port, on_free_ports, server_process


def redis_server_binary() -> str:
    found = shutil.which("redis-server") or shutil.which("valkey-server")
    if found is None:
        missing("redis-server (the Redis state store tests)", "apt-get install redis-server")
    return found


@dataclass
class RedisServer:
    """A redis-server on a free loopback port that a test may stop and start again.

    Its data is appended to a file in ``workdir`` (and written out when it stops),
    so a server started again holds what it held. Its port is chosen when it first
    starts (0 until then).
    """

    workdir: Path
    port: int = 0
    password: str | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{chosen(self.port)}"

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
        """Run the server for the duration of a ``with`` block: on a free port the first
        time, on the same one after that."""
        if self.port:
            return self._process()
        return on_free_ports(self._process, self._choose_port)

    def _process(self) -> Any:
        return server_process(self.argv(), port=self.port, workdir=self.workdir)

    def _choose_port(self) -> None:
        self.port = free_port()
