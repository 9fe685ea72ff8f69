"""The MCP benchmark runs every contestant on both transports (no figure is checked)."""

from __future__ import annotations

import shutil

import pytest

from tests.benchmarks import bench_mcp, count_mcp
from tests.support.real_parts import requires

pytestmark = [
    pytest.mark.slow,
    requires(shutil.which("wrk") is not None, "wrk", "apt-get install wrk"),
]


@pytest.mark.anyio
async def test_one_run_reports_every_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    await bench_mcp.main(calls=3, rounds=1, seconds=1, levels=(1, 2))

    out = capsys.readouterr().out
    assert "bridge / direct (low-level)" in out
    assert "bridge / direct (MCPServer)" in out
    assert "server CPU per call, bridge / MCPServer → NATS" in out
    for pair in (
        "bridge / MCPServer nats",
        "bridge json / MCPServer nats json",
        "bridge / MCPServer",
        "bridge json / MCPServer json",
    ):
        for connections in (1, 2):
            assert f"{pair} at {connections:>3} conns" in out
    # Every contestant's CPU per call: 4 over stdio, 6 over HTTP at each level.
    assert out.count("µs/call") == 4 + 6 * 2
    assert "FAILED" not in out


@pytest.mark.anyio
@pytest.mark.parametrize("contestant", ["direct", "bridge"])
async def test_the_handler_count_calls_each_contestant(contestant: str) -> None:
    assert await count_mcp.measure(contestant, calls=3, counting=False) > 0
