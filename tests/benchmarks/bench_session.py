"""``AgentSession.tools()`` on a large configuration: 10,000 tools in 200 groups.

Run with ``uv run python tests/benchmarks/bench_session.py``. pytest does not
collect it (its name does not start with ``test_``). Target: ``session.tools()``
for a (groups, state) seen before under 20 µs, both

* repeated on one session (what an agent loop does every LLM turn), and
* first call on a new session (another request with the same groups and state).

Also printed, without a target: the first call for a (groups, state) never seen
(building the tool list), a request for ``"*"`` (all 10,000 tools offered; the
cost is copying the list), and creating a session. Exits with status 1 when a
target is missed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.config.loading import load_registry
from toolbus.memory.bus import connect

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

# The same synthetic configuration (and timing) as the registry benchmark.
from tests.benchmarks.bench_registry import GROUPS, TOOLS, make_snapshot, per_call

REQUESTED = ["group-1", "group-2", "group-3"]
TARGET = 20e-6


def first_calls(make: Callable[[], AgentSession], count: int) -> float:
    """Mean seconds of the first ``tools()`` call on ``count`` fresh sessions (made untimed)."""
    sessions = [make() for _ in range(count)]
    start = time.perf_counter()
    for session in sessions:
        session.tools()
    return (time.perf_counter() - start) / count


async def measure() -> list[tuple[str, float, float | None]]:
    registry = load_registry(make_snapshot())
    bus = await connect("memory://bench-session")
    tools = Tools(ToolServiceClient(bus), registry)

    def session(groups: list[str], state: str = "analysis") -> AgentSession:
        return AgentSession(
            tools,
            user="bench",
            groups=groups,
            state=state,
            audit=ListAuditSink(),
            metrics=ToolbusMetrics.disabled(),
        )

    warm = session(REQUESTED)
    offered = len(warm.tools())
    repeated = per_call(100_000, warm.tools)
    new_session = first_calls(lambda: session(REQUESTED), 2_000)

    # Never-seen selections: a different group triple for each session.
    cold_sessions = [session([f"group-{g}", f"group-{g + 1}"]) for g in range(10, 110)]
    start = time.perf_counter()
    for cold in cold_sessions:
        cold.tools()
    cold_first = (time.perf_counter() - start) / len(cold_sessions)

    everything = session(["*"])
    all_offered = len(everything.tools())
    wildcard = per_call(2_000, everything.tools)
    create = per_call(2_000, lambda: session(REQUESTED))
    await bus.close()

    return [
        (f"tools(), repeated on one session ({offered} offered)", repeated, TARGET),
        ("tools(), first call on a new session, seen (groups, state)", new_session, TARGET),
        ("tools(), first call for an unseen (groups, state)", cold_first, None),
        (f"tools(), repeated, groups ['*'] ({all_offered} offered)", wildcard, None),
        ("AgentSession(...) creation, seen (groups, state)", create, None),
    ]


def main() -> int:
    rows = anyio.run(measure)
    failed = False
    print(f"AgentSession.tools() with {TOOLS:,} configured tools in {GROUPS} groups")
    for label, seconds, target in rows:
        if target is None:
            print(f"{label:<62} {_fmt(seconds):>10}")
            continue
        ok = seconds < target
        failed |= not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{label:<62} {_fmt(seconds):>10}   target < {_fmt(target):<9} {verdict}")
    return 1 if failed else 0


def _fmt(seconds: float) -> str:
    if seconds >= 0.1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} µs"


if __name__ == "__main__":
    sys.exit(main())
