"""What the call policy adds to a session call on the memory bus.

Run with ``uv run python tests/benchmarks/bench_policy.py``. Two front doors on
the same in-memory bus and tool service: one with no call policy, one with
Cedar (``toolbus[policy]``) deciding every call on its arguments with the
documented example set (tenant isolation, read-only users, a spending cap).
Rounds alternate between the two, so that load on the machine falls on both
alike; the ratio is of the medians of the rounds. Target: the policy adds at
most 30% (ratio ≤ 1.30). Exits with status 1 when the target is missed.

The arguments change with every call (``amount`` counts up), so no decision
is remembered from an earlier call of the same arguments; the ratio with the
same arguments every time (the engine remembers the decision) is printed too.

With ``--callgrind`` each kind of call is counted in instructions instead
(``valgrind --tool=callgrind``, a process per kind, counters zeroed after the
warm-up): the same figures whatever the machine's load.

    uv run python tests/benchmarks/bench_policy.py [--callgrind]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from toolbus import AgentSession, open_tools, tool_service

TARGET = 1.30
ROUNDS = 15
CALLS = 200

POLICIES = """
permit(principal, action == Action::"call", resource);

forbid(principal, action, resource)
when { context.arguments has tenant }
unless { principal has tenant && context.arguments.tenant == principal.tenant };

forbid(principal, action, resource)
when { principal has role && principal.role == "auditor" }
unless { resource.annotations has readOnlyHint && resource.annotations.readOnlyHint };

forbid(principal, action, resource)
when { context.arguments has amount && context.arguments.amount > 1000000 };
"""


@tool_service("shop-service", config_params=["action"])
async def shop(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return "done"


CONFIG = {
    "tool-service": {"shop-service": shop.descriptor()},
    "tool": {
        "refund": {
            "type": "tool-service",
            "name": "refund",
            "description": "refund",
            "service": "shop-service",
            "action": "refund",
            "arguments": [
                {"name": "tenant", "type": "string", "description": "tenant"},
                {"name": "amount", "type": "integer", "description": "amount"},
            ],
        }
    },
}


async def per_call(session: AgentSession, start: int, *, repeated: bool = False) -> float:
    """Mean seconds of a call; ``repeated``: the same arguments every time (decisions
    remembered), else new ones every time (every call evaluated)."""
    began = time.perf_counter()
    for amount in range(start, start + CALLS):
        arguments = {"tenant": "acme", "amount": 7 if repeated else amount}
        outcome = await session.call("refund", arguments)
        assert outcome.ok, outcome.observation
    return (time.perf_counter() - began) / CALLS


def _settings() -> tuple[dict[str, Any], dict[str, Any]]:
    """The door settings without a policy, and with the example set."""
    folder = Path(tempfile.mkdtemp())
    (folder / "calls.cedar").write_text(POLICIES)
    users = {"users": {"alice": ["default"]}}
    with_policy = {
        "permissions": users,
        "policy": {
            "files": [str(folder / "calls.cedar")],
            "reload": False,
            "users": {"alice": {"tenant": "acme"}},
        },
    }
    return {"permissions": users}, with_policy


async def measure() -> tuple[float, float, float]:
    plain_settings, with_policy = _settings()
    async with AsyncExitStack() as stack:
        plain_tools = await stack.enter_async_context(
            open_tools("memory://bench-policy", CONFIG, serve=[shop], settings=plain_settings)
        )
        policy_tools = await stack.enter_async_context(
            open_tools("memory://bench-policy", CONFIG, settings=with_policy)
        )
        plain = await stack.enter_async_context(AgentSession(plain_tools, user="alice"))
        checked = await stack.enter_async_context(AgentSession(policy_tools, user="alice"))
        await per_call(plain, 0)  # warm both up
        await per_call(checked, 0)
        off: list[float] = []
        on: list[float] = []
        remembered: list[float] = []
        for round_ in range(ROUNDS):
            start = (round_ + 1) * CALLS
            off.append(await per_call(plain, start))
            on.append(await per_call(checked, start))
            remembered.append(await per_call(checked, start, repeated=True))
    return statistics.median(off), statistics.median(on), statistics.median(remembered)


#: The kinds of call counted with --callgrind.
KINDS = ("plain", "checked", "remembered")


async def counted_run(kind: str, calls: int) -> None:
    """Runs under callgrind: warm up, zero the counters, ``calls`` calls of ``kind``, dump."""
    plain_settings, with_policy = _settings()
    settings = plain_settings if kind == "plain" else with_policy
    async with (
        open_tools("memory://bench-policy", CONFIG, serve=[shop], settings=settings) as tools,
        AgentSession(tools, user="alice") as session,
    ):
        await per_call(session, 0)
        _control("-z")
        for start in range(CALLS, CALLS + calls, CALLS):
            await per_call(session, start, repeated=kind == "remembered")
        _control("-d")


def _control(command: str) -> None:
    subprocess.run(
        ["callgrind_control", command, str(os.getpid())], check=True, capture_output=True
    )


def counted(kind: str, calls: int) -> int:
    """Instructions per session call of ``kind``, from a run of this script under callgrind."""
    with tempfile.TemporaryDirectory(prefix="toolbus-policy-") as scratch:
        out = Path(scratch) / "count.%p"
        subprocess.run(
            [
                "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                sys.executable, __file__, "--counted", kind, "--calls", str(calls),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )  # fmt: skip
        (dump,) = Path(scratch).glob("count.*.1")
        summary = re.search(r"^summary: (\d+)", dump.read_text(), re.MULTILINE)
        assert summary is not None, f"no summary in {dump}"
        return int(summary.group(1)) // calls


def count_instructions(calls: int) -> int:
    figures = {kind: counted(kind, calls) for kind in KINDS}
    for kind, figure in figures.items():
        print(
            f"session call, {kind:<10} {figure:>10,} instructions ({figure / figures['plain']:.3f})"
        )
    ratio = figures["checked"] / figures["plain"]
    print(f"ratio, new arguments (target ≤ {TARGET:.2f}): {ratio:.3f}")
    return 0 if ratio <= TARGET else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--callgrind", action="store_true", help="count instructions")
    parser.add_argument("--calls", type=int, default=1000, help="calls counted (--callgrind)")
    parser.add_argument("--counted", choices=KINDS, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.counted:  # this process runs under callgrind
        anyio.run(counted_run, options.counted, options.calls)
        return 0
    if options.callgrind:
        return count_instructions(options.calls)
    off, on, remembered = anyio.run(measure)
    ratio = on / off
    print(f"session call, no policy:                 {off * 1e6:8.1f} µs")
    print(f"session call, Cedar, new arguments:      {on * 1e6:8.1f} µs")
    print(f"session call, Cedar, repeated arguments: {remembered * 1e6:8.1f} µs")
    print(f"ratio, new arguments (target ≤ {TARGET:.2f}): {ratio:.3f}")
    print(f"ratio, repeated arguments:             {remembered / off:.3f}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
