"""Starting real broker servers for tests: free loopback ports, readiness, clean stop."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path

import anyio

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float, log: Path) -> None:
    """Block until ``port`` accepts connections; fail with the server's log if it dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"server exited with {process.returncode} before listening on {port}:\n"
                + log.read_text(errors="replace")[-4000:]
            )
        with contextlib.suppress(OSError), socket.create_connection((LOOPBACK, port), 0.2):
            return
        # Polling a socket is the readiness signal a foreign server gives us.
        time.sleep(0.05)
    raise RuntimeError(
        f"server did not listen on {port} within {timeout} s:\n"
        + log.read_text(errors="replace")[-4000:]
    )


@contextlib.contextmanager
def server_process(
    argv: Sequence[str],
    *,
    port: int,
    workdir: Path,
    ready_timeout: float = 30.0,
    env: dict[str, str] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run a server until the block ends; its output goes to ``workdir/server.log``."""
    log = workdir / "server.log"
    with log.open("ab") as out:
        process = subprocess.Popen(
            list(argv),
            cwd=workdir,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:
        wait_for_port(port, process, ready_timeout, log)
        yield process
    finally:
        stop_process(process)


def stop_process(process: subprocess.Popen[bytes], grace: float = 5.0) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Restartable:
    """A server a test stops and starts again at the same address (with its data).

    ``run`` starts the server for a ``with`` block (``NatsServer.running`` and the
    like). Use it as a context manager: the server runs from ``with`` on, and is
    stopped at its end whatever the test did to it.
    """

    def __init__(self, run: Callable[[], AbstractContextManager[subprocess.Popen[bytes]]]) -> None:
        self._run = run
        self._running: AbstractContextManager[subprocess.Popen[bytes]] | None = None
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Restartable:
        self._start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._running is not None:
            self._running.__exit__(None, None, None)

    def _start(self) -> None:
        self._running = self._run()
        self._process = self._running.__enter__()

    async def stop(self) -> None:
        """Stop the server (SIGTERM, as an orderly restart does) and wait until it has."""
        assert self._process is not None
        await anyio.to_thread.run_sync(stop_process, self._process)

    async def start(self) -> None:
        """Start it again; returns once it listens."""
        await anyio.to_thread.run_sync(self._start)
