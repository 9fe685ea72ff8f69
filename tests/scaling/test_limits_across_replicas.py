"""Limits, budgets and cached answers count where replicas meet: in the shared store.

Real parts throughout: the 3-node NATS cluster's R3 key-value buckets, or
Debian's redis-server; every replica has a connection of its own and seals
what it keeps with the deployment's key. Many calls at once over several
replicas never pass a limit; two gateway processes behind haproxy, with no
stickiness, refuse a user's call past it whichever of them serves it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.nats.cluster import NatsCluster
from tests.scaling.balancer import SERVED_BY, round_robin
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from toolbus.application.doors.budgets import Budgets
from toolbus.application.doors.counters import Counters
from toolbus.application.sealing import load_seal_keys, new_seal_jwk, sealed
from toolbus.domain.limits.rates import Rate
from toolbus.domain.limits.settings import parse_limit_settings
from toolbus.plugins import connect_state
from toolbus.ports import StateStore

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]


@asynccontextmanager
async def replicas(
    store_url: tuple[str, dict[str, Any]], count: int
) -> AsyncIterator[list[StateStore]]:
    """``count`` connections to the store, each sealed with one shared key, as replicas'."""
    url, options = store_url
    jwk = json.dumps(new_seal_jwk(f"seal-{uuid.uuid4().hex[:6]}"))
    keys = load_seal_keys(["env:SEAL"], environ={"SEAL": jwk})
    async with AsyncExitStack() as stack:
        stores = []
        for _ in range(count):
            store = await connect_state(url, options)
            stack.push_async_callback(store.close)
            stores.append(sealed(store, keys))
        yield stores


@pytest.mark.parametrize("algorithm", ["sliding-window", "token-bucket"])
async def test_many_calls_at_once_over_three_replicas_never_pass_the_limit(
    store_url: tuple[str, dict[str, Any]], algorithm: str
) -> None:
    rate = Rate(200, 3600.0, algorithm)  # type: ignore[arg-type]
    key = f"replicas-{uuid.uuid4().hex[:8]}/user=alice"
    granted = 0
    async with replicas(store_url, 3) as stores:
        counters = [Counters(store) for store in stores]

        async def one(index: int) -> None:
            nonlocal granted
            taken = await counters[index % 3].take(key, rate)
            granted += taken.granted

        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                for index in range(600):
                    group.start_soon(one, index)

    assert granted == 200


async def test_budgets_add_up_what_every_replica_charged(
    store_url: tuple[str, dict[str, Any]],
) -> None:
    (budget,) = parse_limit_settings(
        {
            "costs": {"tools": {"*": 0.1}},
            "budgets": [{"name": f"b{uuid.uuid4().hex[:8]}", "amount": 3, "every": "1d"}],
        }
    ).budgets
    async with replicas(store_url, 3) as stores:
        ledgers = [Budgets([budget], store) for store in stores]
        async with anyio.create_task_group() as group:
            for index in range(30):
                group.start_soon(ledgers[index % 3].charge, "alice", ("default",), 0.1)
        fresh = Budgets([budget], stores[0])  # reads the store: no charge of its own remembered
        spent = await fresh.spent(budget, "user=alice")
        refused = await fresh.check("alice", ("default",))

    assert spent.spent == pytest.approx(3.0)
    assert refused is not None and refused.limit == budget.name


async def test_a_limit_holds_across_gateway_replicas_behind_a_balancer(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    state, options = store_url
    deployment = Deployment(
        tmp_path,
        scaling_cluster.url(),
        state,
        options,
        extra_toml='[[limits]]\nname = "steps"\ncalls = 5\nevery = "1h"\n',
    )
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(verify=False))
        _, left_port = await stack.enter_async_context(deployment.door("gateway"))
        _, right_port = await stack.enter_async_context(deployment.door("gateway"))
        base = stack.enter_context(round_robin([left_port, right_port], tmp_path / "haproxy"))
        http = await stack.enter_async_context(
            httpx.AsyncClient(base_url=base, headers={"Authorization": f"Bearer {ALICE_KEY}"})
        )
        answers = [
            await http.post(
                "/v1/tools/step-in/call", json={"groups": GROUPS, "arguments": {"n": n}}
            )
            for n in range(8)
        ]

    assert [a.status_code for a in answers] == [200] * 5 + [429] * 3, [a.text for a in answers]
    # Both replicas served calls, and both refused: the count is the store's, not theirs.
    assert {a.headers[SERVED_BY] for a in answers[:5]} == {"r0", "r1"}
    assert {a.headers[SERVED_BY] for a in answers[5:]} == {"r0", "r1"}
    assert all(a.json()["limit"] == "steps" for a in answers[5:])
    assert sum(deployment.runs.values()) == 5
