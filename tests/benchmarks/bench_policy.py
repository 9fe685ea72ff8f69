"""What the call policy adds to a session call on the memory bus.

Run with ``uv run python tests/benchmarks/bench_policy.py``. Two front doors on
the same in-memory bus and tool service: one with no call policy, one with
Cedar (``toolbus[policy]``) deciding every call on its arguments with the
documented example set (tenant isolation, read-only users, a spending cap).
Rounds alternate between the two, so that load on the machine falls on both
alike; the ratio is of the medians of the rounds. Target: the policy adds at
most 10% (ratio ≤ 1.10). Exits with status 1 when the target is missed.

The arguments change with every call (``amount`` counts up), so no decision
is remembered from an earlier call of the same arguments; the ratio with the
same arguments every time (the engine remembers the decision) is printed too.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from toolbus import AgentSession, open_tools, tool_service

TARGET = 1.10
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


async def measure() -> tuple[float, float, float]:
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
    async with AsyncExitStack() as stack:
        plain_tools = await stack.enter_async_context(
            open_tools(
                "memory://bench-policy", CONFIG, serve=[shop], settings={"permissions": users}
            )
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


def main() -> int:
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
