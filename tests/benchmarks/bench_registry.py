"""Registry performance on a large configuration: 10,000 tools in 200 groups.

Run with ``uv run python tests/benchmarks/bench_registry.py``. pytest does not
collect it (its name does not start with ``test_``). Targets:

* building the registry (validation included) under 0.5 s;
* a cached ``available()`` call under 5 µs;
* an uncached ``available()`` call under 10 ms.

Exits with status 1 when a target is missed, so it can gate a release.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from typing import Any

from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry

TOOLS = 10_000
GROUPS = 200
SERVICES = 50
STATES = ["undefined", "research", "analysis", "results", "modification"]

BUILD_TARGET = 0.5
CACHED_TARGET = 5e-6
UNCACHED_TARGET = 10e-3


def make_snapshot(seed: int = 7) -> dict[str, Any]:
    """A deterministic snapshot: each tool in 1-3 groups, a third limited to some states."""
    rng = random.Random(seed)
    services = {
        f"service-{i}": {
            "request-queue": f"non-persistent://tg/request/service-{i}",
            "response-queue": f"non-persistent://tg/response/service-{i}",
            "config-params": [{"name": "collection", "required": True}, "style"],
        }
        for i in range(SERVICES)
    }
    tools: dict[str, Any] = {}
    for i in range(TOOLS):
        descriptor: dict[str, Any] = {
            "type": "tool-service",
            "name": f"tool-{i}",
            "description": f"Tool number {i}",
            "service": f"service-{i % SERVICES}",
            "collection": f"collection-{i % 17}",
            "arguments": [{"name": "question", "type": "string", "description": "What to ask"}],
            "group": [f"group-{g}" for g in rng.sample(range(GROUPS), rng.randint(1, 3))],
        }
        if i % 3 == 0:
            descriptor["applicable-states"] = rng.sample(STATES, 2)
        if i % 4 == 0:
            descriptor["state"] = rng.choice(STATES)
        tools[f"tool-{i}"] = descriptor
    return {"tool-service": services, "tool": tools}


def best_of(runs: int, action: Callable[[], object]) -> float:
    """The fastest of ``runs`` timings of ``action``, in seconds."""
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        action()
        best = min(best, time.perf_counter() - start)
    return best


def per_call(calls: int, action: Callable[[], object]) -> float:
    """Mean seconds per call over ``calls`` calls (best of five batches)."""

    def batch() -> None:
        for _ in range(calls):
            action()

    return best_of(5, batch) / calls


def worst_uncached(snapshot: dict[str, Any]) -> float:
    """Slowest first call over a few selections, each the best of three fresh registries."""
    selections: list[tuple[list[str] | None, str | None]] = [
        (["group-1", "group-2", "group-3"], "analysis"),  # few matches
        ([f"group-{g}" for g in range(0, GROUPS, 2)], None),  # half the groups
        (["*"], "results"),  # every tool passes the group check
        (None, None),
    ]
    registries = [load_registry(snapshot) for _ in range(3)]
    worst = 0.0
    for groups, state in selections:
        best = float("inf")
        for registry in registries:
            start = time.perf_counter()
            registry.available(groups, state)
            best = min(best, time.perf_counter() - start)
        worst = max(worst, best)
    return worst


def main() -> int:
    snapshot = make_snapshot()
    build = best_of(5, lambda: load_registry(snapshot))
    registry: Registry = load_registry(snapshot)

    requested = ["group-1", "group-2", "group-3"]
    registry.available(requested, "analysis")
    cached = per_call(100_000, lambda: registry.available(requested, "analysis"))

    uncached = worst_uncached(snapshot)

    rows = [
        ("build (10,000 tools, 200 groups)", build, BUILD_TARGET),
        ("available(), cached", cached, CACHED_TARGET),
        ("available(), uncached (worst case)", uncached, UNCACHED_TARGET),
    ]
    failed = False
    for label, seconds, target in rows:
        ok = seconds < target
        failed |= not ok
        verdict = "ok" if ok else "MISSED"
        print(f"{label:<38} {_fmt(seconds):>10}   target < {_fmt(target):<9} {verdict}")
    return 1 if failed else 0


def _fmt(seconds: float) -> str:
    if seconds >= 0.1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.2f} µs"


if __name__ == "__main__":
    sys.exit(main())
