"""Running tool services as separate ``toolbus serve`` processes, as in production."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

HERE = Path(__file__).parent


class ServeProcess:
    """A ``toolbus serve`` process and the lines it wrote to stderr."""

    def __init__(self, process: Process) -> None:
        self.process = process
        self.lines: list[str] = []
        self._new_line = anyio.Event()
        #: Every line the process wrote has been read.
        self.read_all = False

    async def read_stderr(self) -> None:
        assert self.process.stderr is not None
        pending = ""
        try:
            async for text in TextReceiveStream(self.process.stderr):
                pending += text
                *complete, pending = pending.split("\n")
                if complete:
                    self.lines.extend(complete)
                    self._new_line.set()
                    self._new_line = anyio.Event()
        finally:
            self.read_all = True
            self._new_line.set()

    async def wait_for(self, fragment: str, count: int = 1) -> None:
        """Wait until ``count`` stderr lines contain ``fragment``."""
        while sum(fragment in line for line in self.lines) < count:
            if self.read_all:
                raise AssertionError("toolbus serve exited early:\n" + "\n".join(self.lines))
            await self._new_line.wait()

    async def stop(self) -> None:
        """SIGTERM, as a rollout does: the service drains its calls in flight, then exits."""
        self.process.terminate()
        await self.process.wait()

    def kill(self) -> None:
        """Die at once, like a crashed process: no drain, no nack."""
        self.process.send_signal(signal.SIGKILL)


@asynccontextmanager
async def serve_many(
    services: Sequence[str],
    brokers: Sequence[str],
    *,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    ready_timeout: float = 60.0,
    options: Sequence[str] = (),
) -> AsyncIterator[list[ServeProcess]]:
    """One ``toolbus serve SERVICES --broker URL [OPTIONS]`` process per broker URL.

    Started together; yields once every service of every process is live (it
    said ``serving``).
    """
    toolbus = Path(sys.executable).parent / "toolbus"
    environment = {**os.environ, "PYTHONPATH": str(HERE), **(env or {})}
    async with AsyncExitStack() as stack, anyio.create_task_group() as readers:
        started: list[ServeProcess] = []
        for broker in brokers:
            argv = [str(toolbus), "serve", *services, "--broker", broker, *options]
            process = await anyio.open_process(argv, cwd=workdir, env=environment)
            stack.push_async_callback(_stop, process)
            started.append(ServeProcess(process))
            readers.start_soon(started[-1].read_stderr)
        try:
            with anyio.fail_after(ready_timeout):
                for served in started:
                    await served.wait_for("serving ", count=len(services))
            yield started
        finally:
            readers.cancel_scope.cancel()


@asynccontextmanager
async def serve(
    services: Sequence[str],
    broker: str,
    *,
    workdir: Path,
    env: Mapping[str, str] | None = None,
    options: Sequence[str] = (),
) -> AsyncIterator[ServeProcess]:
    """Start ``toolbus serve SERVICES --broker BROKER OPTIONS``; yield once all are live."""
    async with serve_many(services, [broker], workdir=workdir, env=env, options=options) as (
        served,
    ):
        yield served


async def _stop(process: Process) -> None:
    """SIGTERM (the service drains and exits), SIGKILL if that takes too long."""
    with anyio.CancelScope(shield=True):
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
        await process.aclose()
