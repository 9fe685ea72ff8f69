"""How long toolbus takes to start: imports, ``toolbus --version``, and a service ready on NATS.

Three measures, each against a baseline in the same run:

* **processes**: ``python -c pass``, ``python -c "import toolbus"``, a program's
  usual imports (``from toolbus import ToolServiceClient, tool_service``) and
  ``toolbus --version``, each run as a whole process, taking turns round after
  round; the median wall-clock and CPU time (user + system, from the child's
  rusage) of each, and each minus ``python -c pass`` (the interpreter's own
  start-up, which toolbus cannot change).
* **serving**: ``toolbus serve joke-service`` on a nats-server started for the
  run, from ``exec`` to the line ``serving joke-service ...`` on its error
  stream (it is then subscribed and answering); median over rounds.
* **imports** (``--importtime``): ``python -X importtime`` of ``import toolbus``
  and of ``toolbus --version``: the modules that take longest, by their own time.

Every process runs with a bytecode cache, as an installed toolbus does (pip
compiles it at install, and Python writes it on first import): the children
write theirs under a directory of this run (``PYTHONPYCACHEPREFIX``), warmed by a
first run, even where ``PYTHONDONTWRITEBYTECODE`` is set. ``--no-bytecode-cache``
measures a first start instead, every module compiled from source.

With ``--callgrind`` the processes are also counted in instructions (``valgrind
--tool=callgrind``), which the machine's load does not change: on a busy machine
those, and the ratio to ``python -c pass``, are the figures to compare.

    uv run python tests/benchmarks/bench_startup.py [--rounds 10] [--importtime] [--callgrind]
        [--no-bytecode-cache]
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

PYTHON = sys.executable
_SCRIPT = Path(PYTHON).with_name("toolbus")
#: ``toolbus`` as a user runs it: the environment's console script, else the module.
TOOLBUS = [str(_SCRIPT)] if _SCRIPT.exists() else [PYTHON, "-m", "toolbus"]
PROCESSES: dict[str, list[str]] = {
    "python -c pass": [PYTHON, "-c", "pass"],
    "import toolbus": [PYTHON, "-c", "import toolbus"],
    "a program's imports": [
        PYTHON, "-c", "from toolbus import ToolServiceClient, running, tool_service",
    ],
    "toolbus --version": [*TOOLBUS, "--version"],
}  # fmt: skip
#: The children's environment (see bytecode_cache).
ENV = dict(os.environ)
#: The targets, on an idle machine (seconds, wall-clock).
TARGETS = {"import toolbus": 0.15, "toolbus --version": 0.25, "serving": 1.0}


def timed(argv: Sequence[str]) -> tuple[float, float]:
    """Wall-clock and CPU seconds (user + system) of one run of ``argv``."""
    began = time.perf_counter()
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - began
    if status != 0:
        raise SystemExit(
            f"{' '.join(argv)} failed: {child.stderr.read().decode() if child.stderr else ''}"
        )
    return wall, usage.ru_utime + usage.ru_stime


def processes(rounds: int) -> dict[str, tuple[float, float]]:
    """Median (wall, CPU) seconds per process, the processes taking turns every round."""
    walls: dict[str, list[float]] = {name: [] for name in PROCESSES}
    cpus: dict[str, list[float]] = {name: [] for name in PROCESSES}
    for argv in PROCESSES.values():  # warm the file cache once
        timed(argv)
    for _ in range(rounds):
        for name, argv in PROCESSES.items():
            wall, cpu = timed(argv)
            walls[name].append(wall)
            cpus[name].append(cpu)
    return {
        name: (statistics.median(walls[name]), statistics.median(cpus[name])) for name in PROCESSES
    }


def ready_after(url: str, workdir: Path) -> float:
    """Seconds from starting ``toolbus serve joke-service`` to its ``serving`` line."""
    argv = [*TOOLBUS, "serve", "joke-service", "--broker", url]
    began = time.perf_counter()
    child = subprocess.Popen(
        argv, cwd=workdir, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=ENV
    )
    assert child.stderr is not None
    try:
        for line in child.stderr:
            if line.startswith("serving joke-service"):
                return time.perf_counter() - began
        raise SystemExit(f"toolbus serve ended without serving (exit {child.wait()})")
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)


def serving(rounds: int) -> float:
    from tests.nats.server import NatsServer

    with tempfile.TemporaryDirectory(prefix="toolbus-startup-") as scratch:
        server = NatsServer(Path(scratch))
        with server.running():
            ready_after(server.url, Path(scratch))  # warm up
            return statistics.median(ready_after(server.url, Path(scratch)) for _ in range(rounds))


def import_profile(argv: Sequence[str], top: int = 12) -> list[tuple[int, int, str]]:
    """(own µs, cumulative µs, module) of the modules ``argv`` spends longest importing."""
    done = subprocess.run(
        [PYTHON, "-X", "importtime", *argv[1:]] if argv[0] == PYTHON else list(argv),
        capture_output=True,
        text=True,
        env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"},
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (.*)$", line)
        if match:
            rows.append((int(match[1]), int(match[2]), match[3]))
    return sorted(rows, reverse=True)[:top]


def instructions(argv: Sequence[str]) -> int:
    """Instructions ``argv`` runs, counted by callgrind."""
    with tempfile.TemporaryDirectory(prefix="toolbus-startup-") as scratch:
        out = Path(scratch) / "count"
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv],
            check=True,
            capture_output=True,
            env={**ENV, "PYTHONHASHSEED": "0"},
        )
        found = re.search(r"^summary: (\d+)", out.read_text(), re.MULTILINE)
        assert found is not None
        return int(found[1])


def bytecode_cache(directory: str | None) -> None:
    """Children write and read their bytecode under ``directory`` (None: compile every time)."""
    if directory is None:
        ENV["PYTHONDONTWRITEBYTECODE"] = "1"
        ENV["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="toolbus-no-pycache-")
        return  # an empty prefix: no cached bytecode is found, none is written
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    ENV["PYTHONPYCACHEPREFIX"] = directory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--importtime", action="store_true", help="show the slowest imports")
    parser.add_argument("--callgrind", action="store_true", help="count instructions too")
    parser.add_argument("--no-serve", action="store_true", help="leave out toolbus serve")
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="a first start: compile from source"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="toolbus-pycache-") as cache:
        bytecode_cache(None if options.no_bytecode_cache else cache)
        report(options)


def report(options: argparse.Namespace) -> None:
    print(
        f"{platform.python_implementation()} {platform.python_version()} ({PYTHON}); "
        f"load average {os.getloadavg()[0]:.2f} at the start; "
        + ("no bytecode cache" if options.no_bytecode_cache else "with a bytecode cache")
    )
    figures = processes(options.rounds)
    base_wall = figures["python -c pass"][0]
    print(f"\nprocesses, median of {options.rounds} rounds taking turns:")
    print(f"  {'':<22} {'wall ms':>8} {'CPU ms':>8} {'wall - pass':>12} {'target':>8}")
    for name, (wall, cpu) in figures.items():
        target = TARGETS.get(name)
        print(
            f"  {name:<22} {wall * 1e3:8.1f} {cpu * 1e3:8.1f} {(wall - base_wall) * 1e3:12.1f}"
            + (f" {target * 1e3:8.0f}" if target else "")
        )
    if not options.no_serve:
        ready = serving(max(3, options.rounds // 2))
        print(
            f"\ntoolbus serve joke-service on NATS: serving after {ready * 1e3:.0f} ms "
            f"(median; target {TARGETS['serving'] * 1e3:.0f})"
        )
    if options.callgrind:
        print("\ninstructions (callgrind):")
        baseline = instructions(PROCESSES["python -c pass"])
        for name, argv in PROCESSES.items():
            counted = baseline if name == "python -c pass" else instructions(argv)
            print(f"  {name:<22} {counted:>14,} ({counted / baseline:5.2f}× python -c pass)")
    if options.importtime:
        for name in ("import toolbus", "toolbus --version"):
            print(f"\nslowest imports of {name} (-X importtime, µs own / cumulative):")
            for own, cumulative, module in import_profile(PROCESSES[name]):
                print(f"  {own:>8,} {cumulative:>10,}  {module.strip()}")
    print(f"\nload average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
