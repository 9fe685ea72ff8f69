"""What the A2A tests share: a nats-server, processes whose readiness shows in their log."""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process

from tests.doors.processes import door_environment


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
