"""A tool call through the MCP bridge against the same tool called directly over MCP.

Over stdio, the SDK's client calls an ``echo`` tool, one call at a time, of:

* **direct (low-level)**: an SDK low-level ``Server`` in a subprocess whose
  handler answers the call itself: the MCP round trip with nothing behind it.
* **direct (MCPServer)**: the same tool written with the SDK's ``MCPServer``
  (the usual way to write an MCP tool): what a user would otherwise run.
* **MCPServer → NATS**: an ``MCPServer`` whose ``echo`` tool calls that same echo
  tool service over NATS itself, with hand-written nats-py code sending the bytes
  the bridge sends (the TrustGraph request and its ``id``, ``deadline``,
  ``traceparent`` and ``user`` headers, a subscription on the response subject
  and a dict of futures): what a user would write instead of running the bridge,
  and the bridge's honest competitor, since both cross the bus.
* **bridge**: ``toolbus mcp serve`` in a subprocess, calling through an agent
  session over NATS an echo tool service hosted in this process.

Figures: sequential p50 latency per call, the contestants' calls taken in
turn (so a change in the machine's load hits all of them alike), best round of
each, and each server process's CPU time per call, read from ``/proc`` (the
bridge's without the broker hop: the echo service runs in this process).

Over streamable HTTP (2026-07-28 requests, which need no session), ``wrk``
(its own process, one thread; ``apt-get install wrk``) posts ``tools/call``
to an ``MCPServer`` answering in its own process, to the ``MCPServer`` calling the
tool service over NATS, and to ``toolbus mcp serve --transport http`` (bearer
key, permissions), each with and without
JSON answers (``json_response``, ``--json-response``), at 1 and 16 connections, the
contestants taken in turn each round, best round of each: calls per second
and the server process's CPU per call.

The targets: p50 at most 1.1x the ``MCPServer`` calling over NATS over stdio
(1.2x the low-level server, 1.05x ``MCPServer`` answering in its process); over
HTTP at least 0.9x the calls per second of the ``MCPServer`` calling over NATS
(and of ``MCPServer``).

    uv run python tests/benchmarks/bench_mcp.py [--calls 300] [--rounds 3] [--seconds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
from mcp import Client, StdioServerParameters
from mcp_types import CLIENT_CAPABILITIES_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import LATEST_MODERN_VERSION

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.bench_gateway import _children, _cpu_of, lua, wrk
from tests.nats.server import NatsServer
from tests.support.servers import LOOPBACK, server_on_free_port
from toolbus import running, tool_service
from toolbus.plugins import connect
from toolbus_mcp.serving.server import WORKFLOW_META_KEY

STDIO_TARGETS = {
    "direct (low-level)": 1.20,
    "direct (MCPServer)": 1.05,
    "MCPServer → NATS": 1.10,
}
HTTP_TARGET = 0.90
API_KEY = "bench-mcp-0123456789abcdef"
#: How many MCP clients (workflows) the bridge's HTTP requests come from.
CLIENTS = 16
#: The bridge's HTTP contestants: the default (answers as event streams where the
#: SDK commits to one), and --json-response.
BRIDGES = {"bridge": (), "bridge json": ("--json-response",)}


LOWLEVEL_SERVER = """
import anyio
import mcp_types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server

TOOL = types.Tool(
    name="echo",
    description="Echo the text.",
    input_schema={"type": "object", "properties": {"text": {"type": "string"}}},
)


async def list_tools(ctx, params):
    return types.ListToolsResult(tools=[TOOL])


async def call_tool(ctx, params):
    text = (params.arguments or {}).get("text", "")
    return types.CallToolResult(content=[types.TextContent(text=text)])


server = Server("echo", on_list_tools=list_tools, on_call_tool=call_tool)


async def main():
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


anyio.run(main)
"""

MCPSERVER_SERVER = """
from mcp.server import MCPServer

server = MCPServer("echo")


@server.tool()
def echo(text: str) -> str:
    \"\"\"Echo the text.\"\"\"
    return text


server.run()
"""

#: An MCPServer whose tool calls the echo tool service over NATS, by hand with nats-py:
#: the request's bytes and headers as the bridge sends them (``NATS_URL [PORT MODE]``).
MCPSERVER_NATS = """
import asyncio, json, os, sys, time, uuid
import nats
from mcp.server import MCPServer

URL = sys.argv[1]
USER = "alice" if len(sys.argv) > 2 else "mcp"
server = MCPServer("echo")
waiters = {}
connected = {}
connecting = asyncio.Lock()


async def connection():
    async with connecting:
        if not connected:
            nc = await nats.connect(URL)

            async def resolve(msg):
                waiter = waiters.pop((msg.headers or {}).get("id"), None)
                if waiter is not None and not waiter.done():
                    waiter.set_result(msg.data)

            await nc.subscribe("tg.response.echo", cb=resolve)
            await nc.flush()
            connected["nc"] = nc
    return connected["nc"]


@server.tool()
async def echo(text: str) -> str:
    \"\"\"Echo the text.\"\"\"
    nc = connected.get("nc") or await connection()
    call_id = str(uuid.uuid4())
    waiter = asyncio.get_running_loop().create_future()
    waiters[call_id] = waiter
    body = json.dumps({"config": json.dumps({}), "arguments": json.dumps({"text": text})})
    headers = {
        "id": call_id,
        "deadline": f"{time.time() + 60:.3f}",
        "traceparent": f"00-{os.urandom(16).hex()}-{os.urandom(8).hex()}-01",
        "user": USER,
    }
    try:
        await nc.publish("tg.request.echo", body.encode(), headers=headers)
        answer = json.loads(await asyncio.wait_for(waiter, 60))
    finally:
        waiters.pop(call_id, None)
    if answer.get("error"):
        raise RuntimeError(answer["error"]["message"])
    return answer["response"]


if len(sys.argv) > 2:
    server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]),
               json_response=sys.argv[3] == "json")
else:
    server.run()
"""

MCPSERVER_HTTP = MCPSERVER_SERVER.replace(
    "server.run()",
    "import sys\nserver.run('streamable-http', host='127.0.0.1', port=int(sys.argv[1]), "
    "json_response=sys.argv[2:] == ['json'])",
)

SNAPSHOT = {
    "tool-service": {
        "echo": {
            "id": "echo",
            "request-queue": "non-persistent://tg/request/echo",
            "response-queue": "non-persistent://tg/response/echo",
        }
    },
    "tool": {
        "echo": {
            "type": "tool-service",
            "name": "echo",
            "description": "Echo the text.",
            "service": "echo",
            "arguments": [{"name": "text", "type": "string", "description": "the text"}],
        }
    },
}


@tool_service("echo")
async def echo(text: str) -> str:
    return text


@asynccontextmanager
async def stdio_client(command: str, *args: str) -> AsyncIterator[tuple[Client, int]]:
    """A client of a stdio server it starts, warmed up, and the server's process id."""
    parameters = StdioServerParameters(command=command, args=list(args))
    before = set(_children(os.getpid()))
    async with Client(parameters, read_timeout_seconds=60) as client:
        await client.call_tool("echo", {"text": "warm-up"})
        (pid,) = set(_children(os.getpid())) - before
        yield client, pid


async def interleaved_p50s(clients: dict[str, Client], calls: int) -> dict[str, float]:
    """p50 per contestant, their calls taken in turn so that all see the same load."""
    took: dict[str, list[float]] = {name: [] for name in clients}
    for index in range(calls):
        for name, client in clients.items():
            started = time.perf_counter()
            result = await client.call_tool("echo", {"text": f"call {index}"})
            took[name].append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(f"the echo call failed: {result.content}")
    return {name: statistics.median(times) for name, times in took.items()}


async def stdio_contest(
    nats_url: str, config: Path, calls: int, rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Best p50 and CPU seconds per call of each stdio contestant."""
    toolbus = str(Path(sys.executable).with_name("toolbus"))
    bridge = ["mcp", "serve", "--config", str(config), "--broker", nats_url]
    async with (
        stdio_client(sys.executable, "-c", LOWLEVEL_SERVER) as lowlevel,
        stdio_client(sys.executable, "-c", MCPSERVER_SERVER) as mcpserver,
        stdio_client(sys.executable, "-c", MCPSERVER_NATS, nats_url) as over_nats,
        stdio_client(toolbus, *bridge) as bridged,
    ):
        contestants = {
            "direct (low-level)": lowlevel,
            "direct (MCPServer)": mcpserver,
            "MCPServer → NATS": over_nats,
            "bridge": bridged,
        }
        clients = {name: client for name, (client, _) in contestants.items()}
        cpu = {name: _cpu_of(pid) for name, (_, pid) in contestants.items()}
        best = dict.fromkeys(contestants, float("inf"))
        for _ in range(rounds):
            for name, seconds in (await interleaved_p50s(clients, calls)).items():
                best[name] = min(best[name], seconds)
        per_call = {
            name: (_cpu_of(pid) - cpu[name]) / (calls * rounds)
            for name, (_, pid) in contestants.items()
        }
    return best, per_call


def call_body(
    workflow: str | None = None, tool: str = "echo", arguments: dict[str, str] | None = None
) -> str:
    """A 2026-07-28 ``tools/call``: its envelope in ``_meta``, no session needed."""
    meta: dict[str, object] = {
        PROTOCOL_VERSION_META_KEY: LATEST_MODERN_VERSION,
        CLIENT_CAPABILITIES_META_KEY: {},
    }
    if workflow is not None:
        meta[WORKFLOW_META_KEY] = workflow
    arguments = {"text": "hello"} if arguments is None else arguments
    params = {"name": tool, "arguments": arguments, "_meta": meta}
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})


@contextmanager
def http_contestants(
    scratch: Path, nats_url: str, config: Path
) -> Iterator[dict[str, tuple[str, subprocess.Popen[bytes], Path]]]:
    """Each HTTP contestant's URL, process and wrk script, started here, stopped after."""
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": LATEST_MODERN_VERSION,
        "Mcp-Method": "tools/call",
        "Mcp-Name": "echo",
    }
    body = call_body()
    with ExitStack() as stack:
        found: dict[str, tuple[str, subprocess.Popen[bytes], Path]] = {}
        for name, mode in (("MCPServer", "sse"), ("MCPServer json", "json")):
            workdir = scratch / name.replace(" ", "-")
            workdir.mkdir()
            command = [sys.executable, "-c", MCPSERVER_HTTP]
            port, process = stack.enter_context(
                server_on_free_port(
                    lambda port, command=command, mode=mode: [*command, str(port), mode],
                    workdir=workdir,
                )
            )
            found[name] = (
                f"http://{LOOPBACK}:{port}/mcp",
                process,
                lua(workdir / "mcpserver.lua", "POST", body, headers),
            )
        for name, options in BRIDGES.items():
            workdir = scratch / name.replace(" ", "-")
            workdir.mkdir()
            (workdir / "toolbus.toml").write_text(
                f'broker = "{nats_url}"\nconfig = "{config}"\n\n'
                '[[credentials.api-keys]]\nuser = "alice"\nenv = "BENCH_MCP_KEY"\n\n'
                '[permissions.users]\nalice = ["default"]\n'
            )
            toolbus = str(Path(sys.executable).with_name("toolbus"))
            argv = [toolbus, "mcp", "serve", "--transport", "http", *options]
            env = {**os.environ, "BENCH_MCP_KEY": API_KEY}
            port, process = stack.enter_context(
                server_on_free_port(
                    lambda port, argv=argv: [*argv, "--listen", f"{LOOPBACK}:{port}"],
                    workdir=workdir,
                    env=env,
                )
            )
            found[name] = (
                f"http://{LOOPBACK}:{port}/mcp",
                process,
                clients_script(
                    lua(
                        workdir / "bridge.lua",
                        "POST",
                        body,
                        {**headers, "Authorization": f"Bearer {API_KEY}"},
                    )
                ),
            )
        for name, mode in (("MCPServer nats", "sse"), ("MCPServer nats json", "json")):
            workdir = scratch / name.replace(" ", "-")
            workdir.mkdir()
            command = [sys.executable, "-c", MCPSERVER_NATS, nats_url]
            port, process = stack.enter_context(
                server_on_free_port(
                    lambda port, command=command, mode=mode: [*command, str(port), mode],
                    workdir=workdir,
                )
            )
            found[name] = (
                f"http://{LOOPBACK}:{port}/mcp",
                process,
                lua(workdir / "mcpserver.lua", "POST", body, headers),
            )
        for name, (url, _, _) in found.items():
            check_answer(name, url, {**headers, "Authorization": f"Bearer {API_KEY}"}, body)
        yield found


def clients_script(
    script: Path, tool: str = "echo", arguments: dict[str, str] | None = None
) -> Path:
    """``script``, its requests spread over :data:`CLIENTS` workflows, one per client.

    The bridge runs one workflow's calls one at a time (its state moves in
    order), so requests naming no workflow would all queue on their user's
    default one; concurrent MCP clients each have a workflow of their own.
    """
    template = json.dumps(call_body("client-%d", tool, arguments))
    script.write_text(
        script.read_text()
        + f"local n = 0\nrequest = function()\n  n = n % {CLIENTS} + 1\n"
        + f"  return wrk.format(nil, nil, nil, string.format({template}, n))\nend\n"
    )
    return script


def check_answer(name: str, url: str, headers: dict[str, str], body: str) -> None:
    """Fail the run unless the contestant answers the call (wrk counts only HTTP errors)."""
    answer = httpx.post(url, content=body, headers=headers, timeout=30)
    text = answer.text
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        text = [line for line in text.splitlines() if line.startswith("data:")][-1][5:]
    result = json.loads(text).get("result", {}) if answer.status_code == 200 else {}
    if result.get("isError", True) or result["content"][0].get("text") != "hello":
        raise RuntimeError(f"{name} did not answer the call: {answer.status_code} {answer.text}")


def http_contest(
    contestants: dict[str, tuple[str, subprocess.Popen[bytes], Path]],
    levels: tuple[int, ...],
    seconds: float,
    rounds: int,
) -> dict[tuple[str, int], tuple[float, float, int]]:
    """Best (calls/s, CPU seconds per call, failures) per contestant and connections."""
    for url, _, script in contestants.values():  # warm-up, and a failing set-up shows here
        wrk(url, 1, 1, script)
    best: dict[tuple[str, int], tuple[float, float, int]] = {}
    for _ in range(rounds):
        for connections in levels:
            for name, (url, process, script) in contestants.items():
                before = _cpu_of(process.pid)
                rate, total, failed = wrk(url, connections, seconds, script)
                cpu = (_cpu_of(process.pid) - before) / max(total, 1)
                if (name, connections) not in best or rate > best[name, connections][0]:
                    best[name, connections] = (rate, cpu, failed)
    return best


def http_run(
    scratch: Path,
    nats_url: str,
    config: Path,
    levels: tuple[int, ...],
    seconds: float,
    rounds: int,
) -> dict[tuple[str, int], tuple[float, float, int]]:
    with http_contestants(scratch, nats_url, config) as contestants:
        return http_contest(contestants, levels, seconds, rounds)


async def main(calls: int, rounds: int, seconds: float, levels: tuple[int, ...]) -> None:
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work)
        config = directory / "echo.json"
        config.write_text(json.dumps(SNAPSHOT))
        nats = NatsServer(directory / "nats")
        (directory / "nats").mkdir()
        with nats.running():
            bus = await connect(nats.url)
            try:
                async with running(bus, echo):
                    load = os.getloadavg()[0]
                    p50s, cpus = await stdio_contest(nats.url, config, calls, rounds)
                    report_stdio(p50s, cpus, calls, rounds, load)
                    if levels:
                        load = os.getloadavg()[0]
                        # In a thread: the echo service answers on this event loop.
                        figures = await anyio.to_thread.run_sync(
                            http_run, directory, nats.url, config, levels, seconds, rounds
                        )
                        report_http(figures, levels, seconds, rounds, load)
            finally:
                await bus.close()


def report_stdio(
    p50s: dict[str, float], cpus: dict[str, float], calls: int, rounds: int, load: float
) -> None:
    print(
        f"MCP echo over stdio, p50 of {calls} sequential calls, best of {rounds} rounds "
        f"(load {load:.2f})"
    )
    for name, seconds in p50s.items():
        print(f"  {name:<20} {seconds * 1e6:9.0f} µs   server CPU {cpus[name] * 1e6:6.0f} µs/call")
    for baseline, target in STDIO_TARGETS.items():
        ratio = p50s["bridge"] / p50s[baseline]
        verdict = "ok" if ratio <= target else f"over the {target:.2f} target"
        print(f"  bridge / {baseline:<20} {ratio:5.2f}  {verdict}")
    # The steadier figure on a busy machine: what each server process spent per call.
    cpu_ratio = cpu_share(cpus["bridge"], cpus["MCPServer → NATS"])
    print(f"  server CPU per call, bridge / MCPServer → NATS {cpu_ratio}")


def cpu_share(spent: float, baseline: float) -> str:
    """``spent / baseline`` to two places; a run too short for the clock's ticks (the
    process's CPU time moves in steps of 10 ms) says so rather than dividing by zero."""
    if baseline <= 0:
        return "n/a (too few calls to measure CPU)"
    return f"{spent / baseline:4.2f}"


def report_http(
    figures: dict[tuple[str, int], tuple[float, float, int]],
    levels: tuple[int, ...],
    seconds: float,
    rounds: int,
    load: float,
) -> None:
    print(
        f"MCP echo over streamable HTTP, wrk {seconds:g} s per figure, best of {rounds} "
        f"rounds (load {load:.2f})"
    )
    for (name, connections), (rate, cpu, failed) in sorted(figures.items()):
        failures = f"   {failed} FAILED" if failed else ""
        print(
            f"  {name:<14} {connections:>3} conns {rate:8.0f} calls/s   "
            f"server CPU {cpu * 1e6:6.0f} µs/call{failures}"
        )
    # Each bridge against each MCPServer answering the same way (events or JSON): the
    # one answering in its process, and the one calling the same tool over NATS.
    pairs = [
        ("bridge", "MCPServer nats"),
        ("bridge json", "MCPServer nats json"),
        ("bridge", "MCPServer"),
        ("bridge json", "MCPServer json"),
    ]
    for name, baseline in pairs:
        for connections in levels:
            ratio = figures[name, connections][0] / figures[baseline, connections][0]
            cpu = cpu_share(figures[name, connections][1], figures[baseline, connections][1])
            verdict = "ok" if ratio >= HTTP_TARGET else f"under the {HTTP_TARGET:.2f} target"
            print(
                f"  {name} / {baseline} at {connections:>3} conns {ratio:5.2f}  {verdict}"
                f"  (server CPU per call {cpu})"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per wrk figure")
    parser.add_argument(
        "--connections", default="1,16", help="wrk connection counts; empty: no HTTP contest"
    )
    options = parser.parse_args()
    levels = tuple(int(n) for n in options.connections.split(",") if n.strip())
    if levels and shutil.which("wrk") is None:
        parser.exit(2, "wrk is not installed: apt-get install wrk\n")
    anyio.run(main, options.calls, options.rounds, options.seconds, levels)
