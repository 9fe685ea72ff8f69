"""A tool call through the MCP bridge against the same tool called directly over MCP.

Contestants, each the SDK's client calling an ``echo`` tool over stdio, one
call at a time:

* **direct (low-level)**: an SDK low-level ``Server`` in a subprocess whose
  handler answers the call itself: the MCP round trip with nothing behind it.
* **direct (MCPServer)**: the same tool written with the SDK's ``MCPServer``
  (the usual way to write an MCP tool): what a user would otherwise run.
* **bridge**: ``toolbus mcp serve`` in a subprocess, calling through an agent
  session over NATS an echo tool service hosted in this process.

Figures: sequential p50 latency per call, the contestants' calls taken in
turn (so a change in the machine's load hits all of them alike), best round of
each. The target: the bridge adds at most 30% to a direct MCP stdio call.

    uv run python tests/benchmarks/bench_mcp.py [--calls 300] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.nats.server import NatsServer
from toolbus import running, tool_service
from toolbus.plugins import connect

TARGET = 1.30

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
async def stdio_client(command: str, *args: str) -> AsyncIterator[Client]:
    parameters = StdioServerParameters(command=command, args=list(args))
    async with Client(parameters, read_timeout_seconds=60) as client:
        await client.call_tool("echo", {"text": "warm-up"})
        yield client


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


async def main(calls: int, rounds: int) -> None:
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work)
        config = directory / "echo.json"
        config.write_text(json.dumps(SNAPSHOT))
        nats = NatsServer(directory / "nats")
        (directory / "nats").mkdir()
        with nats.running():
            bus = await connect(nats.url)
            toolbus = str(Path(sys.executable).with_name("toolbus"))
            bridge = ["mcp", "serve", "--config", str(config), "--broker", nats.url]
            try:
                async with (
                    running(bus, echo),
                    stdio_client(sys.executable, "-c", LOWLEVEL_SERVER) as lowlevel,
                    stdio_client(sys.executable, "-c", MCPSERVER_SERVER) as mcpserver,
                    stdio_client(toolbus, *bridge) as bridged,
                ):
                    contestants = {
                        "direct (low-level)": lowlevel,
                        "direct (MCPServer)": mcpserver,
                        "bridge": bridged,
                    }
                    best = dict.fromkeys(contestants, float("inf"))
                    for _ in range(rounds):
                        for name, seconds in (await interleaved_p50s(contestants, calls)).items():
                            best[name] = min(best[name], seconds)
            finally:
                await bus.close()
    print(f"MCP echo over stdio, p50 of {calls} sequential calls, best of {rounds} rounds")
    for name, seconds in best.items():
        print(f"  {name:<20} {seconds * 1e6:9.0f} µs")
    for baseline in ("direct (low-level)", "direct (MCPServer)"):
        ratio = best["bridge"] / best[baseline]
        verdict = "ok" if ratio <= TARGET else f"over the {TARGET:.2f} target"
        print(f"  bridge / {baseline:<20} {ratio:5.2f}  {verdict}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    options = parser.parse_args()
    anyio.run(main, options.calls, options.rounds)
