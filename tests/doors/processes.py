"""Door processes for the conformance bindings: ``toolbus`` commands on loopback ports.

A door over HTTP is told ``--listen 127.0.0.1:0`` (:data:`LISTEN`): the system
chooses a free port as it binds, and the door names it in the line it prints
once it listens (:data:`SERVING`), so no other process can take the port first.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.support.servers import LOOPBACK, failed_to_listen, listens

#: The ``toolbus`` command of this environment.
TOOLBUS = str(Path(sys.executable).with_name("toolbus"))
#: ``--listen`` for a door over HTTP: a port the system chooses.
LISTEN = ["--listen", f"{LOOPBACK}:0"]
#: What a door over HTTP says once it listens; the group is its port.
SERVING = re.compile(r"(?:toolbus gateway|serving MCP|serving A2A) on http://[^\s/]+:(\d+)")


def serving_port(output: str) -> int | None:
    """The port a door's output says it serves on, once it says so."""
    said = SERVING.search(output)
    return None if said is None else int(said.group(1))


async def _accepting(port: int) -> bool:
    with suppress(OSError):
        stream = await anyio.connect_tcp(LOOPBACK, port)
        await stream.aclose()
        return True
    return False


@dataclass
class DoorProcess:
    """A running door command; its output goes to ``log``."""

    process: Process
    log: Path
    #: The port it serves HTTP on (0 for a door that does not).
    port: int = 0

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")


def door_environment(extra: dict[str, str]) -> dict[str, str]:
    """This process's environment without its toolbus settings, and ``extra`` (which may
    name them)."""
    environment = dict(os.environ)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_LLM"):
        environment.pop(name, None)
    return {**environment, **extra}


#: Characters of a door's log a failing test shows.
_SHOWN_ON_FAILURE = 4000


@asynccontextmanager
async def door_process(
    args: Sequence[str],
    *,
    cwd: Path,
    environment: dict[str, str],
    http: bool = False,
    ready: str | None = None,
    timeout: float = 60.0,
) -> AsyncIterator[DoorProcess]:
    """Run ``toolbus ARGS`` until the block ends; ready once ``ready`` shows, or for a door
    over ``http`` (ARGS ending in :data:`LISTEN`) once it says which port it serves on."""
    # A log of its own: what another process said cannot pass for this one's start.
    log = cwd / f"{args[0]}-{uuid.uuid4().hex[:8]}.log"
    handle = log.open("ab")
    process = await anyio.open_process(
        [TOOLBUS, *args], cwd=cwd, env=door_environment(environment), stdout=handle, stderr=handle
    )
    running = DoorProcess(process, log)
    try:
        with anyio.fail_after(timeout):
            while True:
                if process.returncode is not None:
                    # PortTaken where it says its named port was taken.
                    raise failed_to_listen(
                        f"toolbus {' '.join(args)} exited with {process.returncode}",
                        [],
                        running.output(),
                    )
                port = serving_port(running.output()) if http else None
                # Listening too, itself: with --workers the line comes before the port
                # is bound, by a worker, and another process may have taken the port.
                if (
                    port is not None
                    and await _accepting(port)
                    and listens(process.pid, port) is not False
                ):
                    running.port = port
                    break
                if ready is not None and ready in running.output():
                    break
                # A foreign process tells readiness only by its port or its log.
                await anyio.sleep(0.05)
        try:
            yield running
        except BaseException as failure:
            # A test that fails while the door runs says what the door logged: a failure
            # inside it (an "internal error" answer, say) is explained only there.
            tail = running.output()[-_SHOWN_ON_FAILURE:]
            failure.add_note(f"--- toolbus {' '.join(args)} logged (its end) ---\n{tail}")
            raise
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
