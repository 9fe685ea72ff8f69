"""The MCP bridge's own work per call, in instructions: its handler against a direct call.

Runs in one process on the in-memory bus, an ``echo`` tool service beside:

* **direct**: ``Tools.call``, what any caller of the bus pays;
* **bridge**: the bridge's ``tools/call`` handler (workflow, agent session,
  argument check, audit record, metrics, the answer's MCP types), calling the
  same tool the same way.

The MCP transport in front of the handler is left out: it is the SDK's, the
same for a server answering in its own process. Under ``valgrind
--tool=callgrind`` (``--callgrind``) the counters are zeroed after the
warm-up and dumped after the measured calls, so the figures are instructions
per call, the same whatever the machine's load; without it, CPU seconds.

    uv run python tests/benchmarks/count_mcp.py --callgrind [--calls 1000]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import mcp_types as mcp
from mcp_types.version import LATEST_MODERN_VERSION

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_mcp import SNAPSHOT, echo
from toolbus import running
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.tools import Tools
from toolbus.domain.config.loading import load_registry
from toolbus.memory import connect
from toolbus.runtime import opened_door
from toolbus_mcp.serving.server import BusMcpServer, McpCaller

WARM_UP = 200


class _Client:
    """What the handler reads of the client's session: a client that declared nothing."""

    client_capabilities = None

    @staticmethod
    def check_client_capability(capability: Any) -> bool:
        return False


class _StdioRequest:
    """What the handler reads of a stdio request's context (no HTTP scope, no ``_meta``)."""

    request = None
    protocol_version = LATEST_MODERN_VERSION
    meta = None
    session = _Client()


async def measure(contestant: str, calls: int, counting: bool) -> float:
    """CPU seconds per call (0 when counting: callgrind's dump has the figure)."""
    bus = await connect("memory://")
    async with running(bus, echo), ToolServiceClient(bus) as client:
        tools = Tools(client, load_registry(SNAPSHOT))
        async with opened_door(tools, local=SNAPSHOT, settings={}) as door:
            server = BusMcpServer(door, caller=McpCaller("mcp"))
            context: Any = _StdioRequest()
            params = mcp.CallToolRequestParams(name="echo", arguments={"text": "hi"})

            async def bridge() -> None:
                answer = await server._call_tool(context, params)
                assert isinstance(answer, mcp.CallToolResult) and not answer.is_error

            async def direct() -> None:
                await tools.call("echo", {"text": "hi"})

            call: Callable[[], Awaitable[None]] = bridge if contestant == "bridge" else direct
            for _ in range(WARM_UP):
                await call()
            if counting:
                _control("-z")
            started = time.process_time()
            for _ in range(calls):
                await call()
            spent = time.process_time() - started
            if counting:
                _control("-d")
            await server.close()
    return spent / calls


def _control(command: str) -> None:
    argv = ["callgrind_control", command, str(os.getpid())]
    subprocess.run(argv, check=True, capture_output=True)


def counted(contestant: str, calls: int, scratch: Path) -> int:
    """Instructions per call of ``contestant``, from a run of this script under callgrind."""
    out = scratch / f"{contestant}.%p"
    subprocess.run(
        [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--counted", contestant, "--calls", str(calls),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    (dump,) = scratch.glob(f"{contestant}.*.1")
    summary = re.search(r"^summary: (\d+)", dump.read_text(), re.MULTILINE)
    assert summary is not None, f"no summary in {dump}"
    return int(summary.group(1)) // calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--counted", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.counted:  # this process runs under callgrind
        anyio.run(measure, options.counted, options.calls, True)
        return
    print(f"MCP bridge's tools/call handler against Tools.call, {options.calls} calls")
    figures = {}
    for contestant in ("direct", "bridge"):
        if options.callgrind:
            with tempfile.TemporaryDirectory() as scratch:
                figures[contestant] = counted(contestant, options.calls, Path(scratch))
            print(f"  {contestant:<7} {figures[contestant]:>9,} instructions per call")
        else:
            seconds = anyio.run(measure, contestant, options.calls, False)
            figures[contestant] = round(seconds * 1e9)
            print(f"  {contestant:<7} {seconds * 1e6:9.1f} µs CPU per call")
    unit = "instructions" if options.callgrind else "ns CPU"
    print(f"  the bridge's own: {figures['bridge'] - figures['direct']:,} {unit} per call")


if __name__ == "__main__":
    main()
