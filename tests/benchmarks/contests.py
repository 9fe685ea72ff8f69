"""Running a contest against the raw client on each broker picked, from the command line.

``bench_streams.py`` and ``bench_payloads.py`` share this: the common options,
a fresh broker per contest, the run's description, the printed rows and the
JSON that ``charts.py`` draws.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.benchmarks.run_info import label, run_info, write
from tests.benchmarks.side_by_side import BROKERS
from toolbus._internal.event_loops import loop_factory

Rows = list[dict[str, Any]]
#: ``contest(broker, url)``: the rows of one broker's contest.
Contest = Callable[[str, str], Awaitable[Rows]]


def arguments(description: str) -> argparse.ArgumentParser:
    """The options every contest takes; a script adds its own."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--brokers", default="memory,nats", help="memory, nats, pulsar, kafka")
    parser.add_argument("--seconds", type=float, default=6.0, help="per figure, all rounds")
    parser.add_argument("--loop", default="asyncio", help="asyncio, uvloop or auto")
    parser.add_argument("--json", type=Path, help="write the results here (for charts.py)")
    return parser


async def on_each_broker(kind: str, brokers: list[str], contest: Contest) -> Rows:
    """``contest`` on each of ``brokers`` in turn, each a fresh server."""
    rows: Rows = []
    for broker in brokers:
        with (
            tempfile.TemporaryDirectory(prefix=f"{kind}-{broker}-") as workdir,
            BROKERS[broker](Path(workdir)) as url,
        ):
            rows += await contest(broker, url)
    return rows


def run(
    kind: str, args: argparse.Namespace, contest: Contest, describe: Callable[[Any], str]
) -> None:
    """Run ``contest`` on the brokers ``args`` pick; print the rows; write the JSON if asked."""
    chosen = [b.strip() for b in args.brokers.split(",") if b.strip()]
    with asyncio.Runner(loop_factory=loop_factory(args.loop)) as runner:
        info = runner.run(asyncio.sleep(0, run_info()))
        results = runner.run(on_each_broker(kind, chosen, contest))
    print(label(info))
    for row in results:
        print(describe(row))
    write(args.json, kind, info, results)
