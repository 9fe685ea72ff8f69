"""A gateway on the in-memory bus with the test tools served beside it."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.support import RunningGateway, Signer, authenticator, services, serving, snapshot
from tests.support.groups import group_installed, needs_group
from tests.support.real_parts import requires
from toolbus import running
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings


@pytest.fixture(scope="session")
def signer() -> Signer:
    return Signer.generate()


@pytest.fixture
def tool_services() -> tuple[Any, ...]:
    return services()


@pytest.fixture
def broker_url() -> str:
    return f"memory://gateway-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def gateway_settings() -> dict[str, Any]:
    """The [gateway] table; tests change it before the gateway starts."""
    return {"max-body-bytes": 64 * 1024}


@pytest.fixture
def door_settings() -> dict[str, Any]:
    """The [doors] table (every front door's limits); tests change it too."""
    return {"max-sessions-per-user": 3}


@pytest.fixture
def jwt_settings() -> dict[str, Any]:
    """More of the [gateway.jwt] table than the test identity provider's keys and names."""
    return {}


@pytest.fixture
async def served(
    broker_url: str,
    tool_services: tuple[Any, ...],
    gateway_settings: dict[str, Any],
    jwt_settings: dict[str, Any],
    door_settings: dict[str, Any],
    signer: Signer,
    tmp_path: Path,
) -> AsyncIterator[RunningGateway]:
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path, jwt_settings),
                config=snapshot(*tool_services),
                settings=parse_gateway_settings(gateway_settings),
                settings_file={"doors": door_settings},
            )
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


#: Debian's Chromium, which the console's browser tests drive through Playwright (the
#: ``browser`` dependency group).
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = (
    requires(
        CHROMIUM is not None, "Chromium (the console's browser tests)", "apt-get install chromium"
    )
    if group_installed("browser")
    else needs_group("browser", "tests/gateway")
)


@pytest.fixture
async def browser_context() -> AsyncIterator[Any]:
    """A fresh context (cookies and all) of a headless Chromium."""
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            yield await browser.new_context(viewport={"width": 1400, "height": 1000})
        finally:
            await browser.close()


@pytest.fixture
async def page(browser_context: Any) -> Any:
    return await browser_context.new_page()
