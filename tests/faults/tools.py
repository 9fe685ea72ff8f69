"""The tool services the fault matrix serves with ``toolbus serve tests.faults.tools:...``.

Each echoes its argument and writes a line per run to the file named by
:data:`RUNS_FILE` (``service n``), so that the test counts how often each call
ran: a call lost has no line, a call run twice two.
"""

from __future__ import annotations

import os

from toolbus import tool_service

#: The environment variable naming the file runs are written to.
RUNS_FILE = "TOOLBUS_FAULTS_RUNS"

PERSISTENT = "persistent://faults/request/echo"
NON_PERSISTENT = "non-persistent://faults/request/echo-np"


def _ran(service: str, n: int) -> None:
    path = os.environ.get(RUNS_FILE)
    if path:
        # One short append per run: lines from concurrent runs never interleave.
        with open(path, "a", encoding="utf-8") as runs:
            runs.write(f"{service} {n}\n")


@tool_service(
    "faults-echo",
    request_queue=PERSISTENT,
    response_queue="non-persistent://faults/response/echo",
)
async def persistent_echo(n: int) -> str:
    """Echoes ``n`` (at least once: a persistent request queue)."""
    _ran("faults-echo", n)
    return str(n)


@tool_service(
    "faults-echo-np",
    request_queue=NON_PERSISTENT,
    response_queue="non-persistent://faults/response/echo-np",
)
async def volatile_echo(n: int) -> str:
    """Echoes ``n`` (at most once: a non-persistent request queue)."""
    _ran("faults-echo-np", n)
    return str(n)
