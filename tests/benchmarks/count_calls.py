"""A tool call's cost in instructions, against the raw loop it is held to, in one run.

Contestants, each a requester and a responder in one process (as the
side-by-side figures have them):

* ``memory-raw``: two asyncio queues and a dict of futures (``bench_memory.py``);
* ``memory``: a ``ToolServiceClient`` calling an echo ``ServiceHost`` on the
  in-memory bus;
* ``nats-hand-rolled``: plain nats-py with the JSON envelope written by hand, the
  tool run in nats-py's callback (``bench_nats.py``);
* ``nats``: toolbus's client and host over core NATS.

Each runs in a process of its own under ``valgrind --tool=callgrind``: the
counters are zeroed after a warm-up and dumped after the measured calls, so a
figure is instructions per call in this process, the same whatever the
machine's load (nats-server runs outside, on the other core, and is not
counted). Calls go one at a time and with 64 in flight. Where a contestant is
bound by this process's CPU (every in-memory one; NATS at 64 in flight), the
ratio of two counts is the ratio their throughputs would have on a quiet
machine.

    uv run python tests/benchmarks/count_calls.py [--calls 2000] [--contestants memory,memory-raw]
    .venv-3.12/bin/python tests/benchmarks/count_calls.py        # on another Python
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import re
import subprocess
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

Call = Callable[[], Awaitable[Any]]
WARM_UP = 300
LEVELS = (1, 64)
CONTESTANTS = ("memory-raw", "memory", "nats-hand-rolled", "nats")
#: What each contestant's figure is held to.
BASELINES = {"memory": "memory-raw", "nats": "nats-hand-rolled"}


@asynccontextmanager
async def contestant(name: str, url: str) -> AsyncIterator[Call]:
    if name == "memory-raw":
        from tests.benchmarks.bench_memory import RawLoop

        raw = RawLoop()
        tasks = [asyncio.create_task(raw.serve()), asyncio.create_task(raw.listen())]
        try:
            yield raw.call
        finally:
            for task in tasks:
                task.cancel()
    elif name == "nats-hand-rolled":
        from tests.benchmarks.bench_nats import hand_rolled

        yield await hand_rolled(url)
    else:
        from toolbus.benchmark import echo_calls

        where = f"memory://count-{uuid.uuid4().hex[:8]}" if name == "memory" else url
        async with echo_calls(where, payload=2) as (call, _):
            yield call


async def counted_run(name: str, url: str, in_flight: int, calls: int) -> None:
    """Runs under callgrind: warm up, zero the counters, make ``calls`` calls, dump."""
    async with AsyncExitStack() as stack:
        call = await stack.enter_async_context(contestant(name, url))
        for _ in range(WARM_UP):
            await call()
        left = calls

        async def worker() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                await call()

        _control("-z")
        await asyncio.gather(*(worker() for _ in range(in_flight)))
        _control("-d")


def _control(command: str) -> None:
    subprocess.run(
        ["callgrind_control", command, str(os.getpid())], check=True, capture_output=True
    )


def count(name: str, url: str, in_flight: int, calls: int, scratch: Path, tree: str) -> int:
    """Instructions per call of ``name`` at ``in_flight``, from a run under callgrind.

    ``tree``: another checkout whose ``toolbus`` core the run imports ("" for this one).
    """
    out = scratch / f"{name}-{in_flight}.%p"
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    if tree:
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [f"{tree}/core/src", env.get("PYTHONPATH")])
        )
    subprocess.run(
        [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            sys.executable, __file__, "--counted", name, "--url", url,
            "--in-flight", str(in_flight), "--calls", str(calls),
        ],
        check=True,
        capture_output=True,
        env=env,
    )  # fmt: skip
    (dump,) = scratch.glob(f"{name}-{in_flight}.*.1")
    summary = re.search(r"^summary: (\d+)", dump.read_text(), re.MULTILINE)
    assert summary is not None, f"no summary in {dump}"
    return int(summary.group(1)) // calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--contestants", default=",".join(CONTESTANTS))
    parser.add_argument(
        "--tree", default="", help="count another checkout's toolbus core (a git worktree)"
    )
    parser.add_argument("--counted", help=argparse.SUPPRESS)
    parser.add_argument("--url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--in-flight", type=int, default=1, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.counted:  # this process runs under callgrind
        asyncio.run(counted_run(options.counted, options.url, options.in_flight, options.calls))
        return
    names = options.contestants.split(",")
    print(
        f"instructions per call, {options.calls} calls after {WARM_UP}; "
        f"{platform.python_implementation()} {platform.python_version()} ({sys.executable})"
        + (f"; toolbus from {options.tree}" if options.tree else "")
    )
    figures: dict[tuple[str, int], int] = {}
    wanted = any(name.startswith("nats") for name in names)
    with (
        tempfile.TemporaryDirectory(prefix="toolbus-count-") as scratch,
        nats_server(Path(scratch), wanted) as url,
    ):
        for name in names:
            for level in LEVELS:
                figures[name, level] = count(
                    name, url, level, options.calls, Path(scratch), options.tree
                )
                print(f"  {name:<17} {level:>2} in flight {figures[name, level]:>9,}", flush=True)
    for name, baseline in BASELINES.items():
        if name in names and baseline in names:
            shares = " / ".join(
                f"{figures[baseline, level] / figures[name, level]:.0%}" for level in LEVELS
            )
            print(f"  {baseline} / {name} (1 / 64 in flight): {shares}")


@contextmanager
def nats_server(workdir: Path, wanted: bool) -> Iterator[str]:
    """A nats-server for the NATS contestants (its URL), or nothing ("")."""
    if not wanted:
        yield ""
        return
    from tests.nats.server import NatsServer

    server = NatsServer(workdir)
    with server.running():
        yield server.url


if __name__ == "__main__":
    main()
