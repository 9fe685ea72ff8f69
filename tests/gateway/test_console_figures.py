"""What the console shows: the whole gateway's figures (every process sharing its state
store), refused calls as refused, and a page, not JSON, for whoever may not use it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway.support import (
    RunningGateway,
    Signer,
    authenticator,
    headers,
    metric,
    serving,
    snapshot,
)
from tests.gateway.test_console_session import log_in
from tests.redis.server import RedisServer
from toolbus import running
from toolbus.application.sealing import SealKey, SealKeys
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings
from toolbus_gateway.figures import merged_rates
from toolbus_gateway.stats import ToolRate

pytestmark = pytest.mark.anyio


async def fragment(served: RunningGateway, name: str) -> str:
    async with served.client("ops") as http:
        answer = await http.get(f"/console/fragments/{name}")
    assert answer.status_code == 200, answer.text
    return answer.text


async def test_a_call_refused_is_shown_refused_not_completed(served: RunningGateway) -> None:
    async with served.client("alice") as http:
        made = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
        refused = await http.post("/v1/tools/admin-reset/call", json={"arguments": {}})
    assert made.status_code == 200 and refused.status_code == 404

    audit = await fragment(served, "audit")
    rows = [row for row in audit.split("<tr")[2:]]  # past the header row
    refused_row, made_row = rows  # newest first
    assert 'class="refused"' in refused_row
    assert "<td>refused</td>" in refused_row and "completed" not in refused_row
    assert "<td>completed</td>" in made_row


async def test_a_person_who_is_not_an_operator_gets_a_page_saying_so(
    served: RunningGateway,
) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        logged_in = await log_in(http, "alice-key-0123456789abcdef")
        browsed = await http.get(
            "/console", headers={**headers("alice"), "Accept": "text/html,*/*;q=0.8"}
        )

    for answer in (logged_in, browsed):
        assert answer.status_code == 403
        assert answer.headers["content-type"].startswith("text/html")
        assert "may not open the console" in answer.text and "console-users" in answer.text
        assert 'name="token"' in answer.text  # to log in as someone who may


async def test_the_gateway_has_an_icon(served: RunningGateway) -> None:
    async with httpx.AsyncClient(base_url=served.url) as http:
        page = await http.get("/console")
        icon = await http.get("/favicon.ico")
        linked = await http.get("/console/static/favicon.svg")

    assert 'rel="icon" href="/console/static/favicon.svg"' in page.text
    for answer in (icon, linked):
        assert answer.status_code == 200
        assert answer.headers["content-type"].startswith("image/svg+xml")
        assert answer.text.startswith("<svg")


# ------------------------------------------------------------------ several processes


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-console"))
    with server.running():
        yield server


async def until(check: Callable[[], Awaitable[bool]], seconds: float = 15) -> None:
    """Ask ``check`` again until it holds: the processes publish their figures every second."""
    with anyio.fail_after(seconds):
        while not await check():  # noqa: ASYNC110
            await anyio.sleep(0.2)


async def test_every_process_sharing_the_store_shows_the_whole_gateway(
    broker_url: str,
    tool_services: tuple[Any, ...],
    signer: Signer,
    tmp_path: Path,
    redis: RedisServer,
) -> None:
    """Two gateway processes on one store (``--workers 2``, or replicas): a session
    opened and a call made through one are in the other's console and metrics."""
    async with AsyncExitStack() as stack:
        bus = await connect(broker_url)
        stack.push_async_callback(bus.close)
        await stack.enter_async_context(running(bus, *tool_services))

        def gateway() -> Gateway:
            return Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings({}),
                state=redis.url,
                state_options={"prefix": f"console-{tmp_path.name}"},
                seal_keys=SealKeys((SealKey("seal-test", b"\x05" * 32),)),  # every replica's
            )

        second = await stack.enter_async_context(serving(gateway()))
        async with serving(gateway()) as first:
            async with first.client("alice") as http:
                opened = await http.post("/v1/sessions", json={})
                called = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})
            assert opened.status_code == 201 and called.status_code == 200, opened.text

            async def seen_on_the_other() -> bool:
                status = await fragment(second, "status")
                rates = await fragment(second, "rates")
                audit = await fragment(second, "audit")
                return (
                    "1 open session" in status
                    and "2 gateway processes" in status
                    and 'data-tool="echo"' in rates
                    and "alice" in audit
                )

            await until(seen_on_the_other)
            for process in (first, second):  # a scrape counts the store, console or not
                async with process.client() as http:
                    scraped = (await http.get("/metrics")).text
                assert metric(scraped, "toolbus_gateway_sessions_open") == 1

        # The first one stopped: the other's console shows itself alone again (the
        # session stays: it is in the store, for any process to serve).
        async def alone() -> bool:
            status = await fragment(second, "status")
            return "gateway process" not in status and "1 open session" in status

        await until(alone)


def test_figures_of_processes_add_up_per_tool() -> None:
    one = [ToolRate("echo", 3, 1, 3.0, 10.0, 30.0), ToolRate("shop", 1, 0, 1.0, 5.0, 5.0)]
    two = [ToolRate("echo", 1, 0, 1.0, 50.0, 50.0)]

    echo, shop = merged_rates([one, two])

    assert (echo.tool, echo.calls, echo.errors, echo.per_minute) == ("echo", 4, 1, 4.0)
    assert echo.mean_ms == pytest.approx((3 * 10.0 + 50.0) / 4)  # weighted by calls
    assert echo.max_ms == 50.0
    assert shop == one[1]
