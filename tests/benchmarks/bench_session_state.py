"""A gateway session call with its state in a store, against the same call with the state in
the process, measured with an external load generator (``wrk``) in one run.

Run with ``uv run python tests/benchmarks/bench_session_state.py [--seconds 5] [--rounds 3]``.
pytest does not collect it (its name does not start with ``test_``).

Three ``toolbus gateway`` processes on one nats-server (the broker), the same
configuration but for ``state``:

* ``in process``: no ``state`` (sessions in the gateway's memory; one replica only);
* ``NATS KV``: ``state`` on the same nats-server (a key-value bucket, file storage),
  sealed with a seal key as every door with a shared store is;
* ``Redis``: ``state`` on a redis-server (Debian's), sealed;
* ``NATS KV unsealed`` and ``Redis unsealed``: the same, in a gateway process whose
  sealing is switched off for this comparison only (a door never runs so: without
  a seal key it does not start), so that what sealing costs is measured.

An echo tool service answers on the bus (a ``toolbus serve`` process). Each
contestant gets sessions opened beforehand, one per connection; ``wrk`` then
sends ``POST /v1/sessions/{id}/calls`` on keep-alive connections, each
connection to its own session, for ``--seconds``, sequentially (1 connection)
and 16 at once, the contestants interleaved in ``--rounds`` rounds (medians
shown). The ratios are to ``in process``, and of each sealed store to itself
unsealed, in the same run.
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
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.doors.processes import LISTEN, serving_port
from tests.nats.server import NatsServer
from tests.redis.server import RedisServer
from tests.support.servers import LOOPBACK, stop_process

KEY = "bench-key-0123456789abcdef0123"
LEVELS = (1, 16)
TOOLBUS = str(Path(sys.executable).with_name("toolbus"))

ECHO = """
from toolbus import tool_service


@tool_service("echo")
async def echo(text: str) -> str:
    return text
"""

SNAPSHOT = {
    "tool-service": {
        "echo": {
            "id": "echo",
            "request-queue": "non-persistent://tg/request/echo",
            "response-queue": "non-persistent://tg/response/echo",
        }
    },
    "tool": {
        "echo": {
            "type": "tool-service",
            "name": "echo",
            "description": "says it back",
            "service": "echo",
            "arguments": [{"name": "text", "type": "string", "description": "what"}],
        }
    },
}

SEAL_KEY = {
    "kty": "oct",
    "alg": "A256GCM",
    "kid": "bench",
    "k": "YmVuY2gtc2VhbC1rZXktMDEyMzQ1Njc4OWFiY2RlZiE",
}

#: A gateway whose door keeps its store unsealed: the comparison's baseline only.
UNSEALED = """
import sys

import toolbus_gateway.gateway as gateway

gateway.door_store = lambda door, store, keys, **options: store
sys.argv[0] = "toolbus"
from toolbus.cli import main

main()
"""

WRK_SCRIPT = """
local sessions = {}
local index = 0
setup = function(thread) end
init = function(args)
  for id in string.gmatch(os.getenv("SESSIONS"), "[^,]+") do table.insert(sessions, id) end
end
request = function()
  index = index + 1
  local id = sessions[(index % #sessions) + 1]
  return wrk.format("POST", "/v1/sessions/" .. id .. "/calls",
    {["Authorization"] = "Bearer KEY", ["Content-Type"] = "application/json"},
    '{"name": "echo", "arguments": {"text": "hello"}}')
end
""".replace("KEY", KEY)


def toml(broker: str, state: str | None, options: dict[str, object]) -> str:
    lines = [f"broker = {json.dumps(broker)}"]
    if state is not None:
        lines.append(f"state = {json.dumps(state)}")
        lines.append('seal-keys = ["seal.jwk"]')
        lines.append("[state-options]")
        lines += [f"{name} = {json.dumps(value)}" for name, value in options.items()]
    lines += [
        "[permissions]",
        'fallback = ["default"]',
        "[[credentials.api-keys]]",
        'user = "bench"',
        'env = "BENCH_KEY"',
        "[doors]",
        "max-sessions-per-user = 64",
    ]
    return "\n".join(lines) + "\n"


def start(argv: list[str], cwd: Path) -> subprocess.Popen[bytes]:
    log = (cwd / "process.log").open("ab")
    env = {**os.environ, "BENCH_KEY": KEY, "PYTHONPATH": str(cwd)}
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_STATE"):
        env.pop(name, None)
    return subprocess.Popen(argv, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=env)


def serving_on(process: subprocess.Popen[bytes], log: Path) -> int:
    """The port a door started with ``--listen 127.0.0.1:0`` says it serves on."""
    deadline = time.monotonic() + 60
    while (port := serving_port(log.read_text(errors="replace"))) is None:
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the gateway did not start:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)  # a foreign process says it is ready in its log
    return port


def wrk(url: str, sessions: list[str], connections: int, seconds: float, script: Path) -> float:
    out = subprocess.run(
        ["wrk", "-t1", f"-c{connections}", f"-d{int(seconds)}s", "-s", str(script), url],
        capture_output=True,
        text=True,
        env={**os.environ, "SESSIONS": ",".join(sessions[:connections])},
        check=True,
    ).stdout
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if errors:
        raise RuntimeError(f"wrk saw {errors.group(1)} failed calls:\n{out}")
    found = re.search(r"Requests/sec:\s+([\d.]+)", out)
    assert found is not None, out
    return float(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("needs wrk: apt-get install wrk")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        nats = NatsServer(root / "nats")
        (root / "nats").mkdir()
        redis = RedisServer(root / "redis")
        (root / "redis").mkdir()
        processes: list[subprocess.Popen[bytes]] = []
        with nats.running(), redis.running():
            try:
                contestants = {
                    "in process": (None, {}),
                    "NATS KV": (nats.url, {"bucket": "bench"}),
                    "NATS KV unsealed": (nats.url, {"bucket": "bench-unsealed"}),
                    "Redis": (redis.url, {"prefix": "bench"}),
                    "Redis unsealed": (redis.url, {"prefix": "bench-unsealed"}),
                }
                tools = root / "tools"
                tools.mkdir()
                (tools / "echo_tool.py").write_text(ECHO)
                (tools / "toolbus.toml").write_text(toml(nats.url, None, {}))
                processes.append(start([TOOLBUS, "serve", "echo_tool:echo"], tools))
                time.sleep(2)  # the service subscribes; calls before would time out
                urls: dict[str, str] = {}
                for name, (state, options) in contestants.items():
                    where = root / name.replace(" ", "-")
                    where.mkdir()
                    (where / "toolbus.toml").write_text(toml(nats.url, state, options))
                    (where / "tools.json").write_text(json.dumps(SNAPSHOT))
                    (where / "seal.jwk").write_text(json.dumps(SEAL_KEY))
                    launcher = [sys.executable, "-c", UNSEALED] if "unsealed" in name else [TOOLBUS]
                    argv = [*launcher, "gateway", "--config", "tools.json", *LISTEN]
                    processes.append(start(argv, where))
                    port = serving_on(processes[-1], where / "process.log")
                    urls[name] = f"http://{LOOPBACK}:{port}"
                sessions = {name: open_sessions(url, max(LEVELS)) for name, url in urls.items()}
                script = root / "calls.lua"
                script.write_text(WRK_SCRIPT)
                rates: dict[tuple[str, int], list[float]] = {}
                for _ in range(args.rounds):
                    for level in LEVELS:
                        for name, url in urls.items():
                            rate = wrk(url, sessions[name], level, args.seconds, script)
                            rates.setdefault((name, level), []).append(rate)
                report(rates, args)
            finally:
                for process in processes:
                    stop_process(process)


def open_sessions(url: str, count: int) -> list[str]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=url, headers=headers) as http:
        found = []
        for _ in range(count):
            answer = http.post("/v1/sessions", json={})
            answer.raise_for_status()
            found.append(answer.json()["session_id"])
            warm = http.post(
                f"/v1/sessions/{found[-1]}/calls",
                json={"name": "echo", "arguments": {"text": "warm"}},
            )
            warm.raise_for_status()
        return found


def report(rates: dict[tuple[str, int], list[float]], args: argparse.Namespace) -> None:
    load = os.getloadavg()
    print(
        f"gateway session calls, wrk, {args.seconds:g} s each, median of {args.rounds} rounds; "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}"
    )
    columns = [f"{n} connection(s) | vs in process | sealed vs unsealed" for n in LEVELS]
    print("| state | " + " | ".join(columns) + " |")
    print("|---|" + "---:|---:|---:|" * len(LEVELS))
    for name in ("in process", "NATS KV", "NATS KV unsealed", "Redis", "Redis unsealed"):
        cells = []
        for level in LEVELS:
            rate = statistics.median(rates[(name, level)])
            base = statistics.median(rates[("in process", level)])
            unsealed = rates.get((f"{name} unsealed", level))
            versus = "" if unsealed is None else f"{rate / statistics.median(unsealed):.1%}"
            cells += [f"{rate:,.0f}/s", f"{rate / base:.0%}", versus]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
