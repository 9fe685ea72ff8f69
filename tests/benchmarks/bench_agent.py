"""The agent loop's own cost per iteration, on the in-memory bus and on NATS.

Run with ``uv run python tests/benchmarks/bench_agent.py`` (``--iterations``,
``--requests``). pytest does not collect it.

The model answers instantly (an in-process model that calls one tool per
turn, then answers), so what is measured is everything the loop adds around
the model: exporting the current state's tools, events, the session's access
and state bookkeeping, the audit record, and the tool call over the bus. The
baseline, measured in the same run on the same bus, is the same tool call made
directly through ``Tools.call``; the loop's overhead per iteration is the
difference, and the ratio says how much an iteration costs compared with the
bare call. Each case is repeated with 10, 100 and 1,000 tools offered.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.support.servers import LOOPBACK, nats_argv, server_on_free_port
from toolbus import AgentLimits, AgentLoop, AgentRequest, Tools, ToolServiceClient, running
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import tool_service
from toolbus.domain.agent.turns import ModelTurn, ToolCall
from toolbus.domain.config.loading import load_registry
from toolbus.plugins import connect

TOOL_COUNTS = (10, 100, 1_000)
ROUNDS = 5


@tool_service("bench-echo")
async def echo(text: str) -> str:
    return text


def snapshot(tools: int) -> dict[str, Any]:
    return {
        "tool-service": {"bench-echo": echo.descriptor()},
        "tool": {
            f"echo-{n}": {
                "type": "tool-service",
                "name": f"echo-{n}",
                "description": f"Echo number {n}: returns its text",
                "service": "bench-echo",
                "arguments": [{"name": "text", "type": "string", "description": "what to echo"}],
            }
            for n in range(tools)
        },
    }


class InstantModel:
    """Calls ``echo-0`` on each turn until ``calls`` were made, then answers; no waiting."""

    model = "instant"
    tool_format = "openai"

    def __init__(self, calls: int) -> None:
        self.calls = calls

    async def stream(
        self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]]
    ) -> AsyncIterator[ModelTurn]:
        made = sum(1 for message in messages if message["role"] == "tool")
        if made < self.calls:
            yield ModelTurn(tool_calls=(ToolCall(f"call-{made}", "echo-0", '{"text": "hi"}'),))
        else:
            yield ModelTurn(text="done")

    async def aclose(self) -> None:
        return None


async def timed(action: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await action()
    return time.perf_counter() - start


async def measure(broker: str, tools: int, iterations: int, requests: int) -> dict[str, float]:
    bus = await connect(broker)
    registry = load_registry(snapshot(tools))
    try:
        async with running(bus, echo), ToolServiceClient(bus) as client:
            facade = Tools(client, registry)
            loop = AgentLoop(
                InstantModel(iterations - 1),
                facade,
                limits=AgentLimits(max_iterations=iterations),
                audit=ListAuditSink(),
                metrics=ToolbusMetrics.disabled(),
            )
            request = AgentRequest(question="bench", user="bench")

            async def bare_calls() -> None:
                for _ in range(requests * (iterations - 1)):
                    await facade.call("echo-0", {"text": "hi"}, user="bench")

            async def loops() -> None:
                for _ in range(requests):
                    result = await loop.run(request)
                    assert result.ok, result.error

            await loops()  # warm: caches, subscriptions, imports
            # Rounds alternate between the two, so that a noisy moment on a shared
            # machine hits both alike; the best round of each counts.
            bare = looped = float("inf")
            for _ in range(ROUNDS):
                bare = min(bare, await timed(bare_calls) / (requests * (iterations - 1)))
                looped = min(looped, await timed(loops) / (requests * iterations))
    finally:
        await bus.close()
    return {"iteration": looped, "bare_call": bare}


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} µs" if seconds < 0.1 else f"{seconds:.3f} s"


async def run(brokers: Mapping[str, str], iterations: int, requests: int) -> None:
    print(
        f"agent loop, {iterations} iterations per request ({iterations - 1} tool calls, "
        f"then the answer), {requests} requests, instant model; best of {ROUNDS} rounds"
    )
    header = (
        f"{'bus':<8} {'tools':>6} {'per iteration':>14} {'bare call':>11} "
        f"{'overhead':>10} {'ratio':>7}"
    )
    print(header)
    ratios = []
    for name, url in brokers.items():
        for tools in TOOL_COUNTS:
            found = await measure(url, tools, iterations, requests)
            overhead = found["iteration"] - found["bare_call"]
            ratio = found["iteration"] / found["bare_call"]
            ratios.append(ratio)
            print(
                f"{name:<8} {tools:>6} {fmt(found['iteration']):>14} {fmt(found['bare_call']):>11} "
                f"{fmt(overhead):>10} {ratio:>6.2f}x"
            )
    print(f"median ratio {statistics.median(ratios):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--no-nats", action="store_true", help="in-memory bus only")
    options = parser.parse_args()
    brokers = {"memory": "memory://bench-agent"}
    binary = shutil.which("nats-server", path=str(Path(sys.executable).parent))
    if options.no_nats or binary is None:
        anyio.run(run, brokers, options.iterations, options.requests)
        return
    workdir = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    try:
        with server_on_free_port(nats_argv(binary), workdir=workdir) as (port, _):
            brokers["nats"] = f"nats://{LOOPBACK}:{port}"
            anyio.run(run, brokers, options.iterations, options.requests)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
