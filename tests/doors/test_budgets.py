"""What calls and model turns cost (``[costs]``), and budgets that stop spending (``[[budgets]]``).

The door is the one every door opens (``opened_door``), over the shop on the
in-memory bus; the agent runs with the scripted model (``toolbus.scripted``),
which reports token usage like any model.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.doors.limits_support import private_metrics, shop_door
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.loop import AgentLimits, AgentLoop
from toolbus.application.doors.budgets import Budgets
from toolbus.application.doors.conversations import DoorConversations
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.limits.settings import parse_limit_settings
from toolbus.plugins import connect_state
from toolbus.scripted.llm import ScriptedLLM
from toolbus.scripted.script import Script

pytestmark = pytest.mark.anyio

PRICED: dict[str, Any] = {
    "costs": {
        "currency": "EUR",
        "tools": {"buy": 0.4, "quote": "reported"},
        "models": {"scripted": {"input-per-million": 100_000, "output-per-million": 200_000}},
    },
    "budgets": [{"name": "daily", "amount": 1.0, "every": "1d"}],
}


async def test_a_spent_budget_refuses_the_call_after_the_one_that_spent_it() -> None:
    audit = ListAuditSink()
    async with shop_door(PRICED, audit=audit) as (door, shop):
        async with door.open("alice") as session:
            outcomes = [await session.call("buy") for _ in range(4)]
        async with door.open("bob") as session:  # a budget of his own
            bobs = await session.call("buy")

    assert [o.status for o in outcomes] == ["ok", "ok", "ok", "refused"]
    assert [o.cost for o in outcomes[:3]] == [0.4, 0.4, 0.4]  # 1.2: the third spent it
    refused = outcomes[3]
    assert (refused.refusal, refused.limit) == ("budget", "daily")
    assert "the budget 'daily' (1 EUR every 1d) is spent" in refused.observation
    assert refused.retry_after is not None and 0 < refused.retry_after <= 86400
    assert bobs.ok and shop.reached("alice", "buy") == 3
    record = audit.for_user("alice")[0]
    assert record.cost == pytest.approx(1.2)
    assert [(c.refusal, c.limit) for c in record.calls][-1] == ("budget", "daily")


async def test_a_tool_that_reports_its_cost_is_charged_what_it_says() -> None:
    async with shop_door(PRICED) as (door, shop):
        shop.quote_cost = 0.75
        async with door.open("carol") as session:
            first = await session.call("quote")
            second = await session.call("quote")
            third = await session.call("quote")

    assert (first.cost, second.cost) == (0.75, 0.75)
    assert third.refusal == "budget"


async def test_costs_add_up_per_call_and_per_tool_in_the_metrics() -> None:
    metrics, registry = private_metrics()
    settings = {"costs": {"tools": {"buy": 0.4, "search": 0.01}}}
    async with shop_door(settings, metrics=metrics) as (door, _), door.open("dave") as session:
        for tool in ("buy", "buy", "search", "quote"):
            await session.call(tool)
        assert session.cost == pytest.approx(0.81)

    def spent(name: str) -> float | None:
        return registry.get_sample_value("toolbus_cost_total", {"kind": "tool", "name": name})

    assert spent("buy") == pytest.approx(0.8)
    assert spent("search") == pytest.approx(0.01)
    assert spent("quote") is None  # no price: nothing counted


async def test_the_agent_stops_before_a_model_turn_its_budget_cannot_pay_for() -> None:
    audit = ListAuditSink()
    metrics, registry = private_metrics()
    # Each turn costs 0.6 EUR (2 tokens in at 0.1, 2 out at 0.2); the budget is 1.
    tokens = {"input_tokens": 2, "output_tokens": 2}
    script = Script(
        [
            {"calls": [{"name": "search", "arguments": {"item": "tea"}}], **tokens},
            {"calls": [{"name": "search", "arguments": {"item": "cups"}}], **tokens},
            {"text": "Tea and cups.", **tokens},
        ]
    )
    events: list[AgentEvent] = []

    async def emit(event: AgentEvent) -> None:
        events.append(event)

    async with shop_door(PRICED, audit=audit, metrics=metrics) as (door, shop):
        loop = AgentLoop(
            ScriptedLLM(script),
            DoorConversations(door),
            limits=AgentLimits(max_iterations=5, time_limit=30),
            metrics=metrics,
        )
        result = await loop.run(AgentRequest(question="find tea things", user="erin"), emit=emit)

    assert result.error is not None and result.error.type == "budget-spent"
    assert "The next model turn was not made" in result.error.message
    assert "the budget 'daily'" in result.error.message
    # The first turn spent 0.6 and its call went; the second spent the rest, so its call
    # was refused (the model read why) and the third turn was not taken.
    assert result.iterations == 2
    assert shop.reached("erin", "search") == 1
    observations = [e for e in events if e.chunk_type == "observation"]
    assert [e.status for e in observations] == ["ok", "refused"]
    assert "the budget 'daily'" in observations[1].content
    final = events[-1]
    assert final.error is not None and final.cost == pytest.approx(result.cost)
    record = audit.for_user("erin")[0]
    assert record.agent is not None and record.agent.limit == "daily"
    assert record.agent.cost == pytest.approx(1.2)
    assert record.cost == pytest.approx(record.agent.cost)  # search has no price
    assert [c.refusal for c in record.calls] == [None, "budget"]
    for refused in ("model-turn", "tool-call"):
        labels = {"name": "daily", "refused": refused}
        assert registry.get_sample_value("toolbus_limit_refusals_total", labels) == 1


async def test_every_replica_adds_to_one_sum_and_a_new_period_starts_it_again() -> None:
    (budget,) = parse_limit_settings(PRICED).budgets
    store = await connect_state("memory://budgets-replicas")
    now = [86400.0 * 20_000 + 100]
    one = Budgets([budget], store, clock=lambda: now[0])
    two = Budgets([budget], store, clock=lambda: now[0])

    await one.charge("fay", ("default",), 0.6)
    now[0] += 2  # past what a replica trusts of its last read
    await two.charge("fay", ("default",), 0.6)
    now[0] += 2
    refused = await one.check("fay", ("default",))
    now[0] += 86400
    again = await two.check("fay", ("default",))

    assert refused is not None and refused.limit == "daily"
    assert refused.retry_after == pytest.approx(86400 - 104)
    assert again is None
    assert (await one.spent(budget, "user=fay")).spent == 0.0


async def test_a_budget_per_group_is_shared_by_the_groups_callers() -> None:
    settings = {
        "costs": {"tools": {"buy": 0.4}},
        "budgets": [{"name": "team", "amount": 1, "every": "month", "per": ["group"]}],
    }
    async with (
        shop_door(settings) as (door, shop),
        door.open("gus") as gus,
        door.open("hal") as hal,
    ):
        spent = [await gus.call("buy"), await gus.call("buy"), await hal.call("buy")]
        after = [await gus.call("buy"), await hal.call("buy")]

    assert all(o.ok for o in spent)
    assert [(o.refusal, o.limit) for o in after] == [("budget", "team"), ("budget", "team")]
    assert shop.reached(tool="buy") == 3
