"""Door processes for the conformance bindings: ``toolbus`` commands on free loopback ports."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.support.servers import LOOPBACK

#: The ``toolbus`` command of this environment.
TOOLBUS = str(Path(sys.executable).with_name("toolbus"))


@dataclass
class DoorProcess:
    """A running door command; its output goes to ``log``."""

    process: Process
    log: Path

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def door_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without its toolbus settings, and ``extra`` (which may
    name them)."""
    environment = dict(os.environ)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_LLM"):
        environment.pop(name, None)
    return {**environment, **extra}


async def _accepting(port: int) -> bool:
    with suppress(OSError):
        stream = await anyio.connect_tcp(LOOPBACK, port)
        await stream.aclose()
        return True
    return False


@asynccontextmanager
async def door_process(
    args: Sequence[str],
    *,
    cwd: Path,
    environment: dict[str, str],
    port: int | None = None,
    ready: str | None = None,
    timeout: float = 60.0,
) -> AsyncIterator[DoorProcess]:
    """Run ``toolbus ARGS`` until the block ends; ready once ``port`` accepts or ``ready`` shows."""
    log = cwd / f"{args[0]}-{args[-1] if len(args) > 1 else ''}.log".replace("/", "_")
    handle = log.open("ab")
    process = await anyio.open_process(
        [TOOLBUS, *args], cwd=cwd, env=door_environment(environment), stdout=handle, stderr=handle
    )
    running = DoorProcess(process, log)
    try:
        with anyio.fail_after(timeout):
            while True:
                if process.returncode is not None:
                    raise RuntimeError(
                        f"toolbus {' '.join(args)} exited with {process.returncode}:\n"
                        + running.output()[-4000:]
                    )
                if port is not None and await _accepting(port):
                    break
                if ready is not None and ready in running.output():
                    break
                # A foreign process tells readiness only by its port or its log.
                await anyio.sleep(0.05)
        yield running
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
