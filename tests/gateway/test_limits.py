"""Rate limits and budgets at the gateway: ``429`` with ``Retry-After``, in its error shape.

A real gateway under uvicorn on the in-memory bus, its ``toolbus.toml`` giving
a limit on ``echo`` and a budget priced on ``find``; calls go through the
direct route (an ordinary JSON body) and through FastAPI's (a chunked body),
which must answer alike.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.support import (
    RunningGateway,
    Signer,
    authenticator,
    metric,
    serving,
    snapshot,
)
from toolbus import running
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

pytestmark = pytest.mark.anyio

SETTINGS: dict[str, Any] = {
    "limits": [{"name": "echoes", "calls": 2, "every": "1h", "tools": ["echo"]}],
    "costs": {"currency": "EUR", "tools": {"find": 0.6}},
    "budgets": [{"name": "daily", "amount": 1, "every": "1d"}],
}


@pytest.fixture
async def limited(
    broker_url: str, tool_services: tuple[Any, ...], signer: Signer, tmp_path: Path
) -> AsyncIterator[RunningGateway]:
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings({"metrics": "operators"}),
                settings_file=SETTINGS,
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


def _chunked(body: bytes) -> Any:
    async def chunks() -> AsyncIterator[bytes]:
        yield body

    return chunks()


async def test_a_call_past_a_limit_answers_429_saying_which_and_when(
    limited: RunningGateway,
) -> None:
    async with limited.client("alice") as http:
        for _ in range(2):
            ok = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
            assert ok.status_code == 200, ok.text
        direct = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
        # A chunked body is FastAPI's to answer: the same answer.
        routed = await http.post(
            "/v1/tools/echo/call",
            content=_chunked(b'{"arguments": {"text": "hi"}}'),
            headers={"Content-Type": "application/json"},
        )
        streamed = await http.post("/v1/tools/echo/stream", json={"arguments": {"text": "hi"}})

    for answer in (direct, routed, streamed):
        assert answer.status_code == 429, answer.text
        body = answer.json()
        assert (body["error"], body["limit"], body["tool"]) == ("limit-reached", "echoes", "echo")
        assert "Try again in" in body["message"]
        retry = int(answer.headers["Retry-After"])
        assert retry == body["retry_after"] and 0 < retry <= 7200


async def test_in_a_session_a_limited_call_is_an_outcome_the_model_reads(
    limited: RunningGateway,
) -> None:
    async with limited.client("bob") as http:
        opened = await http.post("/v1/sessions", json={})
        session = opened.json()["session_id"]
        answers = [
            await http.post(
                f"/v1/sessions/{session}/calls", json={"name": "echo", "arguments": {"text": "x"}}
            )
            for _ in range(3)
        ]

    assert [a.status_code for a in answers] == [200, 200, 200]
    outcome = answers[2].json()
    assert (outcome["status"], outcome["refusal"], outcome["limit"]) == (
        "refused",
        "limit",
        "echoes",
    )
    assert outcome["retry_after"] > 0 and "Try again in" in outcome["observation"]


async def test_a_spent_budget_answers_429_until_its_period_starts_again(
    limited: RunningGateway,
) -> None:
    async with limited.client("ops") as http:
        spent = [
            await http.post("/v1/tools/find/call", json={"arguments": {"action": "look"}})
            for _ in range(2)
        ]
        refused = await http.post("/v1/tools/find/call", json={"arguments": {"action": "look"}})
        scraped = (await http.get("/metrics")).text

    assert [a.status_code for a in spent] == [200, 200]
    assert [a.json()["cost"] for a in spent] == [0.6, 0.6]
    assert refused.status_code == 429
    body = refused.json()
    assert (body["error"], body["limit"]) == ("budget-spent", "daily")
    assert "(1 EUR every 1d) is spent" in body["message"]
    assert int(refused.headers["Retry-After"]) <= 86400
    assert metric(scraped, "toolbus_gateway_limited_requests_total", {"limit": "budgets"}) == 1
    refusals = {"name": "daily", "refused": "tool-call"}
    assert metric(scraped, "toolbus_limit_refusals_total", refusals) == 1
    assert metric(scraped, "toolbus_cost_total", {"kind": "tool", "name": "find"}) == 1.2


async def test_the_console_adds_up_what_each_user_and_tool_cost(
    limited: RunningGateway,
) -> None:
    async with limited.client("ops") as http:
        await http.post("/v1/tools/find/call", json={"arguments": {"action": "look"}})
        panel = await http.get("/console/fragments/costs")

    assert panel.status_code == 200
    assert 'data-user="ops"' in panel.text and 'data-tool="find"' in panel.text
    assert "cost (EUR)" in panel.text and "0.6000" in panel.text
    assert 'data-budget="daily"' in panel.text and "1 EUR every 1d per user" in panel.text


async def test_redacted_metrics_name_no_limit_and_no_priced_tool(
    broker_url: str, tool_services: tuple[Any, ...], signer: Signer, tmp_path: Path
) -> None:
    bus = await connect(broker_url)
    async with running(bus, *tool_services):
        gateway = Gateway(
            broker_url,
            authenticator=authenticator(signer, tmp_path),
            config=snapshot(*tool_services),
            settings=parse_gateway_settings({}),
            settings_file=SETTINGS,
        )
        async with serving(gateway) as server, httpx.AsyncClient(base_url=server.url) as http:
            for _ in range(3):
                await http.post(
                    "/v1/tools/echo/call",
                    json={"arguments": {"text": "hi"}},
                    headers={"Authorization": "Bearer alice-key-0123456789abcdef"},
                )
            scraped = (await http.get("/metrics")).text
    await bus.close()

    assert "echoes" not in scraped and 'name="' not in scraped
    assert metric(scraped, "toolbus_limit_refusals_total", {"refused": "tool-call"}) == 1
