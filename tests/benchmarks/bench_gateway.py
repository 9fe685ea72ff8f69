"""The HTTP gateway against what the same HTTP stack does without it, driven by wrk.

Run with ``uv run python tests/benchmarks/bench_gateway.py [--seconds 5] [--rounds 3]``
(needs ``wrk``: ``apt-get install wrk``). pytest does not collect it.

Every contestant is a server process of its own, started here on a free
127.0.0.1 port, and driven from outside by ``wrk`` (one thread, keep-alive
connections, 1, 16 and 64 at a time), so that no client shares a server's
process or its event loop:

* ``hello``: bare uvicorn + Starlette answering ``GET /`` (the floor of the stack);
* ``healthz``: the gateway's ``GET /healthz``, on the same stack;
* ``fastapi``: a hand-written FastAPI endpoint calling the tool through
  ``Tools.call`` (``tests/benchmarks/http_contestants.py``);
* ``gateway``: ``POST /v1/tools/echo/call`` through ``toolbus gateway``, with an
  API key, access control, the one-call session, the audit record (written to
  a file, ``[doors] audit-file``) and the metrics on.

Calls reach one echo service process over a nats-server started for the run.
The contestants take turns figure by figure (their order rotates every round),
so that a busy moment on the shared machine lands on all of them; each figure
is the median of its rounds, each ratio the median of the ratios within a
round. Besides calls per second, the CPU time the server process (and its
workers) spent per call is read from ``/proc``, which other load disturbs less.
The load average is printed with every figure.

``--workers 2`` adds the gateway with two worker processes sharing the port
(``toolbus gateway --workers 2``, sessions in the nats-server's key-value store).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.benchmarks.http_contestants import configuration  # noqa: E402
from tests.benchmarks.run_info import label, run_info, write  # noqa: E402
from tests.nats.server import NatsServer  # noqa: E402
from tests.support.servers import LOOPBACK, Served, server_on_free_port  # noqa: E402

LEVELS = (1, 16, 64)
API_KEY = "bench-alice-0123456789abcdef0123456789"
CALL_BODY = json.dumps({"arguments": {"text": "hello"}})
#: (contestant, its baseline): each ratio printed is contestant / baseline in the same round.
RATIOS = (("healthz", "hello"), ("gateway", "fastapi"), ("gateway-2", "fastapi"))
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Contestant:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    script: Path | None = None

    def cpu_seconds(self) -> float:
        """User and system CPU time of the server process and its children (workers)."""
        return sum(_cpu_of(pid) for pid in [self.process.pid, *_children(self.process.pid)])


@dataclass
class Figure:
    contestant: str
    connections: int
    round: int
    calls_per_second: float
    cpu_ms_per_call: float
    errors: int
    load: float


@dataclass
class Run:
    figures: list[Figure] = field(default_factory=list)


def _cpu_of(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    # utime and stime are fields 14 and 15 of stat; fields[0] here is field 3.
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    found = [int(child) for child in text.split()]
    return found + [grandchild for child in found for grandchild in _children(child)]


def wrk(url: str, connections: int, seconds: float, script: Path | None) -> tuple[float, int, int]:
    """(requests/s, requests, failed) from one wrk run."""
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--timeout", "10s"]
    if script is not None:
        argv += ["-s", str(script)]
    out = subprocess.run([*argv, url], capture_output=True, text=True, check=True).stdout
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    failed = 0
    if found := re.search(r"Non-2xx or 3xx responses: (\d+)", out):
        failed += int(found.group(1))
    socket_errors = r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)"
    if found := re.search(socket_errors, out):
        failed += sum(int(n) for n in found.groups())
    return rate, total, failed


def measure(contestant: Contestant, connections: int, seconds: float, round: int) -> Figure:
    load = os.getloadavg()[0]
    before = contestant.cpu_seconds()
    rate, total, failed = wrk(contestant.url, connections, seconds, contestant.script)
    spent = contestant.cpu_seconds() - before
    return Figure(
        contestant.name, connections, round, rate, 1000 * spent / max(total, 1), failed, load
    )


def lua(path: Path, method: str, body: str | None, headers: dict[str, str]) -> Path:
    lines = [f'wrk.method = "{method}"']
    if body is not None:
        lines.append(f"wrk.body = {json.dumps(body)}")
    lines += [f'wrk.headers["{name}"] = "{value}"' for name, value in headers.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def toml(broker: str, workers: int) -> str:
    state = f'state = "{broker}"\n' if workers > 1 else ""
    return (
        f'broker = "{broker}"\nconfig = "config.json"\n{state}\n'
        '[[credentials.api-keys]]\nuser = "alice"\nenv = "BENCH_ALICE_KEY"\n\n'
        '[permissions.users]\nalice = ["default"]\n\n'
        '[doors]\naudit-file = "audit.jsonl"\n'
    )


@contextmanager
def contestants(scratch: Path, workers: int) -> Iterator[list[Contestant]]:
    python = sys.executable
    env = {"PYTHONPATH": str(ROOT), "BENCH_ALICE_KEY": API_KEY}
    with ExitStack() as stack:
        nats = NatsServer(scratch / "nats")
        nats.workdir.mkdir()
        stack.enter_context(nats.running())
        (scratch / "config.json").write_text(json.dumps(configuration()))
        module = [python, "-m", "tests.benchmarks.http_contestants"]
        service = scratch / "service"
        service.mkdir()
        service_log = service / "server.log"
        with service_log.open("ab") as out:
            echo = subprocess.Popen(
                [*module, "service", "--broker", nats.url],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **env},
            )
        stack.callback(_stop, echo)
        _wait_for_line(service_log, "echo service ready", echo)

        def start(name: str, argv: Callable[[int], list[str]]) -> Served:
            workdir = scratch / name
            workdir.mkdir(exist_ok=True)
            return stack.enter_context(
                server_on_free_port(argv, workdir=workdir, env=env, ready_timeout=60)
            )

        found: list[Contestant] = []
        port, hello = start("hello", lambda port: [*module, "hello", "--port", str(port)])
        found.append(Contestant("hello", hello, f"http://{LOOPBACK}:{port}/"))

        config = ["--config", str(scratch / "config.json")]
        fastapi_argv = [*module, "fastapi", "--broker", nats.url, *config]
        port, fastapi = start("fastapi", lambda port: [*fastapi_argv, "--port", str(port)])
        call = lua(scratch / "fastapi.lua", "POST", CALL_BODY, {"Content-Type": "application/json"})
        found.append(Contestant("fastapi", fastapi, f"http://{LOOPBACK}:{port}/call/echo", call))

        call = lua(
            scratch / "gateway.lua",
            "POST",
            CALL_BODY,
            {"Content-Type": "application/json", "Authorization": f"Bearer {API_KEY}"},
        )
        for count in sorted({1, workers}):
            where = scratch / f"gateway-{count}"
            where.mkdir()
            (where / "config.json").write_text(json.dumps(configuration()))
            (where / "toolbus.toml").write_text(toml(nats.url, count))
            port, gateway = start(f"gateway-{count}", gateway_argv(python, count))
            base = f"http://{LOOPBACK}:{port}"
            if count == 1:
                found.append(Contestant("healthz", gateway, f"{base}/healthz"))
                found.append(Contestant("gateway", gateway, f"{base}/v1/tools/echo/call", call))
            else:
                name = f"gateway-{count}"
                found.append(Contestant(name, gateway, f"{base}/v1/tools/echo/call", call))
        yield found


def gateway_argv(python: str, workers: int) -> Callable[[int], list[str]]:
    """``toolbus gateway`` with ``workers`` processes, on a port."""
    spread = ["--workers", str(workers)] if workers > 1 else []
    return lambda port: [
        python,
        "-m",
        "toolbus",
        "gateway",
        *spread,
        "--listen",
        f"{LOOPBACK}:{port}",
    ]


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_for_line(log: Path, line: str, process: subprocess.Popen[bytes]) -> None:
    import time

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if line in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            raise RuntimeError(f"{log.parent.name} exited:\n{log.read_text(errors='replace')}")
        time.sleep(0.1)  # a foreign process's log is the only signal it gives
    raise RuntimeError(f"{log.parent.name} did not start:\n{log.read_text(errors='replace')}")


def contest(seconds: float, rounds: int, workers: int, levels: tuple[int, ...]) -> Run:
    run = Run()
    with (
        tempfile.TemporaryDirectory(prefix="bench-gateway-") as scratch,
        contestants(Path(scratch), workers) as found,
    ):
        for contestant in found:  # warm up: imports, caches, connections
            measure(contestant, 16, 1.0, -1)
        for round in range(rounds):
            for connections in levels:
                turn = found[round % len(found) :] + found[: round % len(found)]
                for contestant in turn:
                    figure = measure(contestant, connections, seconds, round)
                    run.figures.append(figure)
                    print(
                        f"round {round} c={connections:>2} {contestant.name:>9}: "
                        f"{figure.calls_per_second:9,.0f}/s  "
                        f"{figure.cpu_ms_per_call:.3f} ms CPU/call  "
                        f"{figure.errors} failed  load {figure.load:.2f}",
                        file=sys.stderr,
                        flush=True,
                    )
    return run


def report(run: Run, levels: tuple[int, ...]) -> str:
    names = list(dict.fromkeys(f.contestant for f in run.figures))
    lines = [
        "| contestant | "
        + " | ".join(f"{n} conn calls/s" for n in levels)
        + " | CPU ms/call ("
        + " / ".join(str(n) for n in levels)
        + ") | failed | load |",
        "|---|" + "---:|" * (len(levels) + 3),
    ]
    for name in names:
        mine = [f for f in run.figures if f.contestant == name]
        rates, cpus = [], []
        for n in levels:
            at = [f for f in mine if f.connections == n]
            rates.append(f"{statistics.median(f.calls_per_second for f in at):,.0f}")
            cpus.append(f"{statistics.median(f.cpu_ms_per_call for f in at):.3f}")
        loads = [f.load for f in mine]
        lines.append(
            f"| {name} | " + " | ".join(rates) + f" | {' / '.join(cpus)} | "
            f"{sum(f.errors for f in mine)} | {min(loads):.1f}–{max(loads):.1f} |"
        )
    header = " | ".join(f"{n} conn" for n in levels)
    lines += ["", f"| ratio (same round, median) | {header} |"]
    lines.append("|---|" + "---:|" * len(levels))
    for top, bottom in RATIOS:
        if top not in names or bottom not in names:
            continue
        cells = []
        for n in levels:
            ratios = []
            by = {(f.contestant, f.connections, f.round): f for f in run.figures}
            for r in {f.round for f in run.figures}:
                a, b = by.get((top, n, r)), by.get((bottom, n, r))
                if a is not None and b is not None:
                    ratios.append(a.calls_per_second / b.calls_per_second)
            cells.append(f"{statistics.median(ratios):.2f} ({min(ratios):.2f}–{max(ratios):.2f})")
        lines.append(f"| {top} / {bottom} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=5.0, help="per figure")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--levels", default="1,16,64", help="connections, comma-separated")
    parser.add_argument("--workers", type=int, default=1, help="also the gateway with N workers")
    parser.add_argument("--json", type=Path, help="write the figures here")
    args = parser.parse_args(argv)
    if shutil.which("wrk") is None:
        parser.exit(2, "wrk is not installed: apt-get install wrk\n")
    levels = tuple(int(n) for n in args.levels.split(","))
    info = run_info("uvloop")
    run = contest(args.seconds, args.rounds, args.workers, levels)
    print(label({**info, "load_average_after": [round(x, 2) for x in os.getloadavg()]}))
    print(report(run, levels))
    write(args.json, "gateway", info, [f.__dict__ for f in run.figures])


if __name__ == "__main__":
    main()
