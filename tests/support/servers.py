"""Starting real broker servers for tests: free loopback ports, readiness, clean stop."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

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
