"""Two commits side by side on the in-memory bus: run before a change on the call path lands.

    uv run python tests/benchmarks/ab_commits.py BASE [HEAD] [--rounds 6] [--seconds 2]
        [--in-flight 1,64]

Each commit is checked out in a temporary git worktree (removed afterwards).
Every round runs, for each commit, a fresh Python process that imports that
worktree's ``toolbus`` (its ``core/src`` first on ``PYTHONPATH``; the installed
dependencies are this environment's) and makes echo calls through
``toolbus.benchmark.echo_calls`` on the in-memory bus for ``--seconds`` at each
in-flight level. The commits take turns, their order swapping every round, so
that a busy moment on a shared machine lands on both; each line printed is the
median over rounds of HEAD / BASE calls per second within a round (below 1:
HEAD slower) and of HEAD / BASE CPU time per call in the child process (above
1: HEAD costlier; load elsewhere disturbs this one less), with the spread and
the load average. The children run on the Python that runs this script, which
says which: run it with another environment's interpreter (``.venv-3.12/bin/python
tests/benchmarks/ab_commits.py ...``) to compare the commits there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Run in each commit's worktree: calls/s per in-flight level, as JSON on stdout.
MEASURE = """
import asyncio, json, sys, time, uuid
import toolbus
from toolbus.benchmark import echo_calls

async def main(seconds, levels):
    figures = {"toolbus": toolbus.__file__}
    async with echo_calls(f"memory://ab-{uuid.uuid4().hex}", payload=2) as (call, _):
        for _ in range(200):
            await call()  # warm up
        for in_flight in levels:
            done = 0
            stop = time.perf_counter() + seconds

            async def worker():
                nonlocal done
                while time.perf_counter() < stop:
                    await call()
                    done += 1

            begin, cpu = time.perf_counter(), time.process_time()
            await asyncio.gather(*(worker() for _ in range(in_flight)))
            figures[str(in_flight)] = done / (time.perf_counter() - begin)
            figures[f"cpu{in_flight}"] = (time.process_time() - cpu) / done * 1e6
    print(json.dumps(figures))

asyncio.run(main(float(sys.argv[1]), [int(n) for n in sys.argv[2].split(",")]))
"""


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def _measure(worktree: Path, seconds: float, levels: str) -> dict[str, float]:
    env = dict(
        os.environ,
        PYTHONPATH=f"{worktree / 'core' / 'src'}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
    )
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(seconds), levels],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=worktree,
    ).stdout
    figures: dict[str, float] = json.loads(out.splitlines()[-1])
    imported = Path(str(figures.pop("toolbus"))).resolve()
    if worktree.resolve() not in imported.parents:
        raise SystemExit(f"the child imported {imported}, not {worktree}'s toolbus")
    return figures


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("base", help="the commit to compare against (e.g. main)")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=2.0, help="per level and round")
    parser.add_argument("--in-flight", default="1,64", help="levels, comma-separated")
    args = parser.parse_args(argv)
    commits = {"base": _git("rev-parse", args.base), "head": _git("rev-parse", args.head)}
    levels = args.in_flight.split(",")
    ratios: dict[str, list[float]] = {level: [] for level in levels}
    #: HEAD / BASE CPU time per call, which load elsewhere disturbs less than calls/s.
    cpu: dict[str, list[float]] = {level: [] for level in levels}
    best: dict[str, dict[str, float]] = {"base": {}, "head": {}}
    with tempfile.TemporaryDirectory(prefix="toolbus-ab-") as temp:
        trees = {side: Path(temp) / side for side in commits}
        for side, commit in commits.items():
            _git("worktree", "add", "--detach", str(trees[side]), commit)
        try:
            for round_ in range(args.rounds):
                order = ["base", "head"] if round_ % 2 == 0 else ["head", "base"]
                figures = {
                    side: _measure(trees[side], args.seconds, args.in_flight) for side in order
                }
                for level in ratios:
                    ratios[level].append(figures["head"][level] / figures["base"][level])
                    cpu[level].append(
                        figures["head"][f"cpu{level}"] / figures["base"][f"cpu{level}"]
                    )
                    for side in commits:
                        best[side][level] = max(best[side].get(level, 0.0), figures[side][level])
                print(
                    f"round {round_ + 1}: "
                    + ", ".join(
                        f"{level} in flight {ratios[level][-1]:.3f} (CPU/call {cpu[level][-1]:.3f})"
                        for level in ratios
                    )
                    + f" (load {os.getloadavg()[0]:.2f})",
                    flush=True,
                )
        finally:
            for tree in trees.values():
                _git("worktree", "remove", "--force", str(tree))
    print(
        f"HEAD {args.head} ({commits['head'][:9]}) / BASE {args.base} ({commits['base'][:9]}), "
        f"on {platform.python_implementation()} {platform.python_version()} ({sys.executable})"
    )
    for level, values in ratios.items():
        print(
            f"{level:>3} in flight: ratio {statistics.median(values):.3f} "
            f"(min {min(values):.3f}, max {max(values):.3f}); best calls/s "
            f"{best['head'][level]:,.0f} vs {best['base'][level]:,.0f}; CPU per call "
            f"{statistics.median(cpu[level]):.3f} (min {min(cpu[level]):.3f}, "
            f"max {max(cpu[level]):.3f})"
        )


if __name__ == "__main__":
    main()
