"""Approvals over the gateway's API: a call waits, an approver lists, approves or denies it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, Signer, authenticator, serving, snapshot
from toolbus import running
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(
    broker_url: str, tool_services: tuple[Any, ...], signer: Signer, tmp_path: Path
) -> AsyncIterator[RunningGateway]:
    """A gateway where bob approves every call of echo."""
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings({}),
                settings_file={"approvals": {"approvers": ["bob"], "tools": ["echo"]}},
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


async def waiting(served: RunningGateway, user: str) -> list[dict[str, Any]]:
    """The approvals ``user`` sees, once one waits (awaited on the door's change feed)."""
    door = served.gateway.door
    assert door is not None and door.book is not None
    async for _ in door.book.changes():
        if await door.book.pending():
            break
    async with served.client(user) as http:
        listed = await http.get("/v1/approvals")
    assert listed.status_code == 200, listed.text
    return list(listed.json()["approvals"])


async def decided_call(served: RunningGateway, verb: str, by: str = "bob") -> tuple[Any, Any]:
    answers: dict[str, Any] = {}

    async def call() -> None:
        async with served.client("alice") as http:
            answers["call"] = await http.post(
                "/v1/tools/echo/call", json={"arguments": {"text": "hello"}}
            )

    async def decide() -> None:
        (approval,) = await waiting(served, "bob")
        async with served.client(by) as http:
            shown = (await http.get("/v1/approvals")).json()["approvals"]
        assert [a["id"] for a in shown] == ([approval["id"]] if by == "bob" else [])
        assert (approval["user"], approval["tool"]) == ("alice", "echo")
        assert approval["arguments"] == {"text": "hello"}
        async with served.client(by) as http:
            answers["decision"] = await http.post(
                f"/v1/approvals/{approval['id']}/{verb}", json={"note": "looked at it"}
            )
            if answers["decision"].status_code != 200:  # not theirs: bob ends the wait
                async with served.client("bob") as bob:
                    await bob.post(f"/v1/approvals/{approval['id']}/deny")

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(call)
            tasks.start_soon(decide)
    return answers["call"], answers["decision"]


async def test_an_approved_call_is_made(served: RunningGateway) -> None:
    call, decision = await decided_call(served, "approve")

    assert decision.status_code == 200
    assert (decision.json()["status"], decision.json()["decided_by"]) == ("approved", "bob")
    assert call.status_code == 200, call.text
    assert "hello" in call.text
    record = [r for r in served.gateway.audit.records if r.user == "alice"][-1]
    assert record.calls[-1].approval is not None
    assert record.calls[-1].approval.decided_by == "bob"


async def test_a_denied_call_is_not_made_and_says_who_denied_it(served: RunningGateway) -> None:
    call, decision = await decided_call(served, "deny")

    assert decision.json()["status"] == "denied"
    assert "bob" in call.text and "looked at it" in call.text
    record = [r for r in served.gateway.audit.records if r.user == "alice"][-1]
    assert record.calls[-1].refusal == "approval"


async def test_only_an_approver_may_decide(served: RunningGateway) -> None:
    call, decision = await decided_call(served, "approve", by="ops")

    assert decision.status_code in (403, 404)
    assert "bob" in call.text
