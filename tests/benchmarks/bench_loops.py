"""uvloop against the standard asyncio loop: the raw baselines and toolbus, per broker.

Each broker's side-by-side contest (``side_by_side.py``: raw client, toolbus,
FastStream where it has request/reply) runs in a fresh process per event loop;
the processes alternate, asyncio then uvloop, ``--repeats`` times, and each
contestant's best figure per loop counts. The ratio uvloop / asyncio is what
the loop alone changes; the absolute figures are this machine's.

    uv run python tests/benchmarks/bench_loops.py [--brokers memory,nats,pulsar,kafka]
        [--seconds 6] [--repeats 2] [--json results/loops.json]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.benchmarks.run_info import label, run_info, write
from tests.benchmarks.side_by_side import BROKERS, contest_in_child, require_faststream

LOOPS = ("asyncio", "uvloop")


def run(brokers: list[str], seconds: float, repeats: int) -> list[dict[str, Any]]:
    best: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    for broker in brokers:
        for _ in range(repeats):
            for loop in LOOPS:
                print(f"measuring {broker} on {loop} …", file=sys.stderr)
                for row in contest_in_child(broker, seconds, loop):
                    for level, figure in row.figures.items():
                        key = (broker, row.contestant, loop, level)
                        if key not in best or figure.throughput > best[key]["throughput"]:
                            best[key] = {**figure.as_dict(), "loop": loop}
    results = []
    for (broker, contestant, loop, level), figure in best.items():
        if loop != "uvloop":
            continue
        base = best[(broker, contestant, "asyncio", level)]
        results.append(
            {
                "broker": broker,
                "contestant": contestant,
                "in_flight": level,
                "asyncio": base,
                "uvloop": figure,
                "ratio": figure["throughput"] / base["throughput"] if base["throughput"] else 0,
            }
        )
    return results


def describe(row: dict[str, Any]) -> str:
    return (
        f"{row['broker']:>6}  {row['contestant']:>10}  {row['in_flight']:>2} in flight  "
        f"asyncio {row['asyncio']['throughput']:>9,.0f} calls/s  "
        f"uvloop {row['uvloop']['throughput']:>9,.0f} calls/s  {row['ratio']:.2f}x"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", default=",".join(BROKERS))
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, help="write the results here (for charts.py)")
    args = parser.parse_args()
    require_faststream("bench_loops.py")
    chosen = [b.strip() for b in args.brokers.split(",") if b.strip()]
    info = run_info("asyncio and uvloop")
    results = run(chosen, args.seconds, args.repeats)
    print(label(info))
    for row in results:
        print(describe(row))
    write(args.json, "loops", info, results)
