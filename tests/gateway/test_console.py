"""The console in a real headless Chromium: it loads, shows services and the workflow,
and follows the bus without a reload."""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.gateway.conftest import needs_chromium
from tests.gateway.support import KEYS, RunningGateway, authenticator, serving, snapshot
from toolbus import Announcer, running
from toolbus.plugins import connect
from toolbus.testing.conformance import echo_service
from toolbus_gateway import Gateway

if TYPE_CHECKING:  # the browser group's; tests using it skip without it
    from playwright.async_api import Page

pytestmark = [pytest.mark.anyio, needs_chromium]

#: Set to a path to keep a screenshot of the console (docs/gateway-console.png is one).
SCREENSHOT = os.environ.get("TOOLBUS_CONSOLE_SCREENSHOT")
#: Tools beside the workflow's, so that the page is tried at the size it must handle.
EXTRA_TOOLS = 1000


def large_snapshot(tools: tuple[Any, ...]) -> dict[str, Any]:
    found = snapshot(*tools)
    echo = tools[0]
    stages = ["browsing", "shopping", "paying", "done"]
    for n in range(EXTRA_TOOLS):
        tool: dict[str, Any] = {
            "type": "tool-service",
            "name": f"catalog-{n:04d}",
            "description": f"catalog lookup {n}",
            "service": echo.id,
            "arguments": [{"name": "text", "type": "string", "description": "query"}],
            "group": [f"team-{n % 12:02d}"],
        }
        if n % 50 == 0:
            at = (n // 50) % (len(stages) - 1)
            tool["applicable-states"] = [stages[at]]
            tool["state"] = stages[at + 1]
        found["tool"][f"catalog-{n:04d}"] = tool
    found["tool"]["start-browsing"] = {
        "type": "tool-service",
        "name": "start-browsing",
        "description": "start",
        "service": echo.id,
        "arguments": [],
        "state": "browsing",
    }
    return found


@pytest.fixture
async def console(
    broker_url: str, tool_services: tuple[Any, ...], tmp_path: Path
) -> AsyncIterator[RunningGateway]:
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url, authenticator=authenticator(), config=large_snapshot(tool_services)
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


async def test_the_console_shows_the_bus_and_follows_it(
    console: RunningGateway, page: Page, broker_url: str
) -> None:
    bus = await connect(broker_url)
    first, later = echo_service(), echo_service()
    problems: list[str] = []  # what the browser's console would show as errors
    page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        await Announcer(bus, first, instance=f"replica-{uuid.uuid4().hex[:4]}").announce()
        async with console.client("alice") as http:
            await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
            await http.get("/v1/tools", params={"groups": "admin"})  # refused: audited

        # Not logged in: the login form, then the console with the session cookie.
        await page.goto(f"{console.url}/console")
        await page.fill("input[name=token]", KEYS["ops"])
        await page.click("button[type=submit]")
        await page.wait_for_selector("body.live")  # the event stream is open

        assert await page.locator(f'#services tr[data-service="{first.id}"]').count() == 1
        for state in ("undefined", "browsing", "shopping", "paying", "done"):
            assert await page.locator(f'svg.workflow g.node[data-state="{state}"]').count() == 1
        assert await page.locator("svg.workflow g.edge").count() >= 4
        assert await page.locator("#tools tr[data-tool]").count() == EXTRA_TOOLS + 8
        assert await page.locator("#audit tr.denied").count() == 1
        assert await page.locator('#rates tr[data-tool="echo"]').count() == 1

        # The filter narrows a thousand rows in place.
        await page.fill("#tool-filter", "catalog-0999")
        visible = page.locator("#tools tr[data-tool]:visible")
        assert await visible.count() == 1

        # A service that announces itself now appears without a reload.
        await Announcer(bus, later).announce()
        await page.wait_for_selector(f'#services tr[data-service="{later.id}"]', timeout=10_000)
        # So does a new denial.
        async with console.client("alice") as http:
            await http.post("/v1/sessions", json={"groups": ["*"]})
        with anyio.fail_after(10):
            while await page.locator("#audit tr.denied").count() < 2:  # noqa: ASYNC110
                await anyio.sleep(0.1)

        # Nothing failed on the way: the log-in page, the icon, the script, the panels.
        assert problems == []

        if SCREENSHOT:
            await page.fill("#tool-filter", "")
            await page.screenshot(path=SCREENSHOT, full_page=False)
    finally:
        await bus.close()


async def test_the_console_is_for_operators_only(console: RunningGateway, page: Page) -> None:
    async with console.client("alice") as http:
        refused = await http.get("/console")
        events = await http.get("/console/events")
    async with console.client() as http:
        login = await http.get("/console")
    assert refused.status_code == 403 and "console-users" in refused.json()["message"]
    assert events.status_code == 403
    assert login.status_code == 401 and 'name="token"' in login.text

    await page.goto(f"{console.url}/console")
    await page.fill("input[name=token]", "not-a-key-0123456789abcdef")
    await page.click("button[type=submit]")
    assert "is not valid" in await page.inner_text("p.error")


async def test_the_console_links_the_asyncapi_document(console: RunningGateway, page: Page) -> None:
    await page.goto(f"{console.url}/console")
    await page.fill("input[name=token]", KEYS["ops"])
    await page.click("button[type=submit]")
    await page.click("text=AsyncAPI document")  # the login cookie goes along

    await page.wait_for_url(f"{console.url}/console/asyncapi.json")
    assert '"asyncapi":"3.0.0"' in (await page.inner_text("body")).replace(" ", "")
