"""How much memory the long-running processes hold: idle, and after 100,000 calls each.

On one nats-server started for the run, three processes as an operator starts
them, each in turn:

* ``toolbus serve joke-service``: called from this process by a
  ``ToolServiceClient`` over NATS, 64 calls in flight;
* ``toolbus gateway`` (an API key, permissions, the audit file): ``POST
  /v1/tools/tell-joke/call`` by ``wrk`` at 16 connections (``apt-get install wrk``);
* ``toolbus mcp serve --transport http`` (a bearer key): 2026-07-28 ``tools/call``
  requests for ``tell-joke`` by ``wrk`` at 16 connections, spread over 16 workflows.

The gateway and the MCP bridge call the joke service above. For each process:
its resident memory (``VmRSS``) once it serves and has answered one call
(idle), after the first 10,000 calls (warm: caches filled, the heap grown to its
working size), halfway (growth that levels off is no leak) and after ``--calls``
(100,000 by default); growth is reported from idle and from warm, with a target of
at most 10% from idle. ``--calls-per-record`` sets the doors' ``calls-per-record``
(a held session keeps its calls for its audit record until then).

    uv run python tests/benchmarks/bench_rss.py [--calls 100000] [--calls-per-record 1000]
        [--processes serve,gateway,mcp]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from mcp_types.version import LATEST_MODERN_VERSION

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_gateway import lua, wrk
from tests.benchmarks.bench_mcp import call_body, clients_script
from tests.nats.server import NatsServer
from tests.support.servers import LOOPBACK, server_on_free_port, stop_process
from toolbus import ToolServiceClient
from toolbus.plugins import connect, load_tool_plugins
from toolbus.runtime import merged_snapshot
from toolbus_joke.service import joke_service

#: The tools the gateway and the bridge offer: the joke plugin's (tell-joke).
JOKES = merged_snapshot(p.snapshot for p in load_tool_plugins() if p.name == "joke")
WARM = 10_000
TARGET = 0.10
API_KEY = "bench-rss-0123456789abcdef0123456789"
TOOLBUS = str(Path(sys.executable).with_name("toolbus"))
SETTINGS = (
    '[[credentials.api-keys]]\nuser = "alice"\nenv = "BENCH_RSS_KEY"\n\n'
    '[permissions.users]\nalice = ["default"]\n\n'
    '[doors]\naudit-file = "audit.jsonl"\n'
)


@contextmanager
def serving(where: Path, url: str) -> Iterator[subprocess.Popen[str]]:
    """``toolbus serve joke-service``, once it says it serves (it listens on no port)."""
    where.mkdir()
    process = subprocess.Popen(
        [TOOLBUS, "serve", "joke-service", "--broker", url],
        cwd=where,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        for line in process.stderr:
            if line.startswith("serving joke-service"):
                break
        else:
            raise RuntimeError(f"toolbus serve ended without serving (exit {process.wait()})")
        # Its later lines are not read: send them nowhere rather than fill the pipe.
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield process
    finally:
        stop_process(process)  # type: ignore[arg-type]  # its text mode is all that differs


def rss_mib(pid: int) -> float:
    """The resident memory of process ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


async def call_service(url: str, calls: int) -> int:
    """``calls`` calls of the joke service, 64 in flight; the number that failed."""
    bus = await connect(url)
    failed = 0
    left = calls
    try:
        async with ToolServiceClient(bus) as client:

            async def worker() -> None:
                nonlocal left, failed
                while left > 0:
                    left -= 1
                    try:
                        await client.call(
                            request_queue=joke_service.request_queue,
                            response_queue=joke_service.response_queue,
                            config={"style": "pun"},
                            arguments={"topic": "llamas"},
                            timeout=30,
                        )
                    except Exception:
                        failed += 1

            await asyncio.gather(*(worker() for _ in range(64)))
    finally:
        await bus.close()
    return failed


def by_wrk(url: str, script: Path) -> Callable[[int], int]:
    """Calls made by wrk at 16 connections, in runs of a few seconds until ``calls`` are made."""

    def make(calls: int) -> int:
        made = failed = 0
        while made < calls:
            _, total, failures = wrk(url, 16, 3, script)
            made += total
            failed += failures
        return failed

    return make


def measure(name: str, pid: int, call: Callable[[int], int], calls: int) -> dict[str, float]:
    """RSS (MiB) idle, warm, halfway and after ``calls``, with the calls' failures."""
    call(1)
    idle = rss_mib(pid)
    failed = call(WARM)
    warm = rss_mib(pid)
    began = time.perf_counter()
    failed += call(calls // 2 - WARM)
    halfway = rss_mib(pid)
    failed += call(calls - calls // 2)
    after = rss_mib(pid)
    figures = {
        "idle": idle,
        "warm": warm,
        "halfway": halfway,
        "after": after,
        "failed": failed,
        "seconds": time.perf_counter() - began,
    }
    print(
        f"  {name:<26} idle {idle:6.1f} MiB   after {WARM:,} {warm:6.1f}   "
        f"{calls // 2:,} {halfway:6.1f}   {calls:,} {after:6.1f}   growth "
        f"{after / idle - 1:+6.1%} from idle, {after / warm - 1:+6.1%} from warm"
        f"{f'   {failed} FAILED' if failed else ''}",
        flush=True,
    )
    return figures


def mcp_script(path: Path) -> Path:
    """wrk's ``tools/call`` of ``tell-joke``, from 16 clients (a workflow each)."""
    joke = {"topic": "llamas"}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "tell-joke",
        "Authorization": f"Bearer {API_KEY}",
    }
    body = call_body(None, "tell-joke", joke)
    return clients_script(lua(path, "POST", body, headers), "tell-joke", joke)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument(
        "--processes", default="serve,gateway,mcp", help="which of serve, gateway, mcp"
    )
    parser.add_argument(
        "--calls-per-record",
        type=int,
        help="the doors' calls-per-record (a held session's audit record, written every so "
        "many calls, holds its calls until then; default 1000)",
    )
    options = parser.parse_args()
    chosen = set(options.processes.split(","))
    if shutil.which("wrk") is None:
        parser.exit(2, "wrk is not installed: apt-get install wrk\n")
    print(
        f"resident memory, {platform.python_implementation()} {platform.python_version()}; "
        f"load average {os.getloadavg()[0]:.2f} at the start"
    )
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="toolbus-rss-") as scratch, ExitStack() as stack:
        work = Path(scratch)
        nats = NatsServer(work / "nats")
        nats.workdir.mkdir()
        stack.enter_context(nats.running())
        env = {"BENCH_RSS_KEY": API_KEY}

        def start(
            name: str, argv: Callable[[int], list[str]]
        ) -> tuple[int, subprocess.Popen[bytes]]:
            """``argv(port)`` started in a directory of its own, on a free port."""
            where = work / name
            where.mkdir()
            (where / "config.json").write_text(json.dumps(JOKES))
            toml = f'broker = "{nats.url}"\nconfig = "config.json"\n\n{SETTINGS}'
            if options.calls_per_record:
                toml += f"calls-per-record = {options.calls_per_record}\n"
            (where / "toolbus.toml").write_text(toml)
            port, process = stack.enter_context(
                server_on_free_port(argv, workdir=where, env=env, ready_timeout=60)
            )
            return port, process

        service = stack.enter_context(serving(work / "service", nats.url))
        if "serve" in chosen:
            results["toolbus serve joke-service"] = measure(
                "toolbus serve joke-service",
                service.pid,
                lambda n: asyncio.run(call_service(nats.url, n)),
                options.calls,
            )
        if "gateway" in chosen:
            port, gateway = start(
                "gateway", lambda port: [TOOLBUS, "gateway", "--listen", f"{LOOPBACK}:{port}"]
            )
            body = json.dumps({"arguments": {"topic": "llamas"}})
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"}
            results["toolbus gateway"] = measure(
                "toolbus gateway",
                gateway.pid,
                by_wrk(
                    f"http://{LOOPBACK}:{port}/v1/tools/tell-joke/call",
                    lua(work / "gateway.lua", "POST", body, headers),
                ),
                options.calls,
            )
        if "mcp" in chosen:
            argv = [TOOLBUS, "mcp", "serve", "--transport", "http", "--listen"]
            port, bridge = start("mcp", lambda port: [*argv, f"{LOOPBACK}:{port}"])
            results["toolbus mcp serve (HTTP)"] = measure(
                "toolbus mcp serve (HTTP)",
                bridge.pid,
                by_wrk(f"http://{LOOPBACK}:{port}/mcp", mcp_script(work / "mcp.lua")),
                options.calls,
            )
        print(
            f"  (the joke service after all of them: {rss_mib(service.pid):.1f} MiB, "
            f"load average {os.getloadavg()[0]:.2f})"
        )
    missed = [name for name, f in results.items() if f["after"] > f["idle"] * (1 + TARGET)]
    print(f"growth over {TARGET:.0%} from idle: {', '.join(missed) or 'none'}")
    sys.exit(1 if missed or any(f["failed"] for f in results.values()) else 0)


if __name__ == "__main__":
    main()
