"""Approvals over the gateway's API: a call waits, an approver lists, approves or denies it."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.gateway.conftest import needs_chromium
from tests.gateway.support import KEYS, RunningGateway, Signer, authenticator, serving, snapshot
from tests.redis.server import RedisServer
from toolbus import running
from toolbus.application.sealing import SealKey, SealKeys
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

if TYPE_CHECKING:  # the browser group's; tests using it skip without it
    from playwright.async_api import Page

pytestmark = pytest.mark.anyio


@pytest.fixture
def approvers() -> list[str]:
    return ["bob"]


@pytest.fixture
async def served(
    broker_url: str,
    tool_services: tuple[Any, ...],
    signer: Signer,
    tmp_path: Path,
    approvers: list[str],
) -> AsyncIterator[RunningGateway]:
    """A gateway where ``approvers`` (bob) approve every call of echo."""
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings({}),
                settings_file={"approvals": {"approvers": approvers, "tools": ["echo"]}},
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


@needs_chromium
@pytest.mark.parametrize("approvers", [["ops"]])
async def test_the_console_shows_a_waiting_call_and_approves_it(
    served: RunningGateway, page: Page
) -> None:
    answers: list[Any] = []

    async def call() -> None:
        async with served.client("alice") as http:
            answers.append(
                await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hello"}})
            )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            await page.goto(f"{served.url}/console")
            await page.fill("input[name=token]", KEYS["ops"])
            await page.click("button[type=submit]")
            await page.wait_for_selector("body.live")  # the event stream is open
            tasks.start_soon(call)
            # The panel follows the approvals without a reload.
            row = page.locator('#approvals tr[data-tool="echo"]')
            await row.wait_for(timeout=30_000)
            assert "alice" in await row.inner_text()
            await row.locator("input[name=note]").fill("fine")
            await row.locator('button[value="approve"]').click()
    assert answers[0].status_code == 200 and "hello" in answers[0].text
    record = [r for r in served.gateway.audit.records if r.user == "alice"][-1]
    assert record.calls[-1].approval is not None
    assert record.calls[-1].approval.decided_by == "ops"


# ------------------------------------------------------------------ pending approvals, per user


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real redis-server: the store the gateway's approvals wait in."""
    server = RedisServer(tmp_path_factory.mktemp("approvals-redis"))
    with server.running():
        yield server.url


@pytest.fixture
async def limited(
    broker_url: str,
    tool_services: tuple[Any, ...],
    signer: Signer,
    tmp_path: Path,
    redis_url: str,
) -> AsyncIterator[RunningGateway]:
    """Bob (and ops) approve echo; three approvals wait at most, two of one user's."""
    bus = await connect(broker_url)
    approvals = {
        "approvers": ["bob", "ops"],
        "tools": ["echo"],
        "timeout": 120,
        "max-pending": 3,
        "max-pending-per-user": 2,
    }
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings({}),
                settings_file={"approvals": approvals},
                state=f"{redis_url}?prefix=approvals-{uuid.uuid4().hex[:8]}",
                seal_keys=SealKeys((SealKey("seal-test", b"\x07" * 32),)),
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


async def test_one_user_cannot_fill_the_pending_approvals(limited: RunningGateway) -> None:
    door = limited.gateway.door
    assert door is not None and door.book is not None
    book = door.book

    async def pending(count: int) -> None:
        async for _ in book.changes():
            if len(await book.pending()) >= count:
                return

    async def call(user: str, text: str) -> Any:
        async with limited.client(user) as http:
            return await http.post("/v1/tools/echo/call", json={"arguments": {"text": text}})

    waited: list[Any] = []

    async def wait_for_approval(user: str, text: str) -> None:
        waited.append(await call(user, text))

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(wait_for_approval, "alice", "one")
            tasks.start_soon(wait_for_approval, "alice", "two")
            await pending(2)
            with anyio.fail_after(10):  # refused at once, not left waiting for a decision
                beyond_her_share = await call("alice", "three")
            tasks.start_soon(wait_for_approval, "ops", "four")  # another user still may
            await pending(3)
            beyond_the_whole = await call("bob", "five")
            for approval in await book.pending():
                async with limited.client("bob") as bob:
                    await bob.post(f"/v1/approvals/{approval.id}/deny")

    assert beyond_her_share.status_code == 403, beyond_her_share.text
    assert "max-pending-per-user" in beyond_her_share.json()["observation"]
    assert beyond_the_whole.status_code == 403, beyond_the_whole.text
    assert "max-pending in [approvals]" in beyond_the_whole.json()["observation"]
    assert sorted(answer.status_code for answer in waited) == [403, 403, 403]  # denied by bob
    assert all("bob denied" in answer.text for answer in waited)
    refused = [
        call.approval
        for record in limited.gateway.audit.records
        for call in record.calls
        if call.refusal == "approval"
    ]
    assert len(refused) == 5


async def test_call_rates_count_the_tool_not_the_wait_for_a_person(
    served: RunningGateway,
) -> None:
    call, decision = await decided_call(served, "approve")
    assert call.status_code == 200 and decision.status_code == 200

    record = [r for r in served.gateway.audit.records if r.user == "alice"][-1]
    made = record.calls[-1]
    assert made.approval is not None and made.approval.waited_seconds > 0
    (rate,) = [r for r in served.gateway.stats.rates() if r.tool == "echo"]
    # The tool's own time, as the audit record has it: not the approver's.
    assert rate.max_ms == pytest.approx(1000 * made.duration_seconds)


@needs_chromium
@pytest.mark.parametrize("approvers", [["ops"]])
async def test_the_approvals_panel_ticks_says_who_decides_and_fits_a_narrow_window(
    served: RunningGateway, browser_context: Any
) -> None:
    page = await browser_context.new_page()
    await page.set_viewport_size({"width": 700, "height": 900})
    problems: list[str] = []
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    answers: list[Any] = []

    async def call() -> None:
        async with served.client("alice") as http:
            answers.append(
                await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hello"}})
            )

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tasks:
            await page.goto(f"{served.url}/console")
            await page.fill("input[name=token]", KEYS["ops"])
            await page.click("button[type=submit]")
            await page.wait_for_selector("body.live")
            tasks.start_soon(call)
            row = page.locator('#approvals tr[data-tool="echo"]')
            await row.wait_for(timeout=30_000)

            expires = row.locator("td.expires")
            first = await expires.inner_text()
            assert first.startswith("4 m "), first  # 300 s, as a person reads it
            # It ticks in the browser, with no event from the server.
            await page.wait_for_function(
                "([cell, was]) => cell.textContent !== was",
                arg=[await expires.element_handle(), first],
                timeout=5_000,
            )
            assert (await row.locator("td.approvers").inner_text()) == "ops"
            since = await row.locator("td.since").inner_text()
            assert since[:8].count(":") == 2 and "s)" in since  # 12:03:04 (2 s)

            # At 700 px the decision is in view, not cut off behind a scroll bar.
            panel = await page.locator("#approvals").bounding_box()
            assert panel is not None
            for verb in ("approve", "deny"):
                button = await row.locator(f'button[value="{verb}"]').bounding_box()
                assert button is not None
                assert button["x"] + button["width"] <= panel["x"] + panel["width"], verb
            overflow = await page.evaluate(
                "() => { const p = document.getElementById('approvals').parentElement;"
                " return p.scrollWidth - p.clientWidth; }"
            )
            assert overflow <= 0

            await row.locator('button[value="approve"]').click()
    assert answers[0].status_code == 200
    assert problems == []  # the favicon included: nothing failed to load
