"""The gateway with an identity provider's keys by URL (``jwks-url``): a real provider
(``oidc-provider``) rotating its keys while calls run, and going away and coming back."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway.support import RunningGateway, services, serving, snapshot
from tests.support.oidc import BRIDGE_CLIENT, OidcProvider, needs_oidc_provider, oidc_provider
from toolbus import running
from toolbus.application.identity.bearer import Authenticator, TokenSettings
from toolbus.plugins import connect
from toolbus_gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.slow, needs_oidc_provider]

#: The gateway's resource: the audience its tokens must name.
RESOURCE = "https://gateway.toolbus.test"


@pytest.fixture
def idp(tmp_path: Path) -> Iterator[OidcProvider]:
    with oidc_provider(tmp_path / "idp") as provider:
        yield provider


@asynccontextmanager
async def gateway_for(idp: OidcProvider, **table: Any) -> AsyncIterator[RunningGateway]:
    """A gateway taking ``idp``'s tokens, its keys from the provider's JWKS URL."""
    tokens = TokenSettings.model_validate(
        {
            "issuer": idp.issuer,
            "jwks-url": idp.jwks_url,
            "resource": RESOURCE,
            "scopes": {"tools:read": ["default"], "tools:admin": ["*"]},
            **table,
        }
    )
    authenticator = Authenticator.from_settings(
        None, tokens, where="toolbus.toml [gateway.jwt]", door="toolbus gateway"
    )
    tools = services()
    config = snapshot(*tools)
    config["permissions"] = {"users": {BRIDGE_CLIENT: ["default"]}}
    broker = f"memory://oauth-{uuid.uuid4().hex[:8]}"
    bus = await connect(broker)
    try:
        async with running(bus, *tools):
            gateway = Gateway(broker, authenticator=authenticator, config=config)
            async with serving(gateway) as server:
                yield server
    finally:
        await bus.close()


async def echo(server: RunningGateway, token: str) -> httpx.Response:
    async with server.client(token=token) as http:
        return await http.post("/v1/tools/echo/call", json={"arguments": {"text": "hi"}})


async def test_a_rotation_at_the_provider_while_calls_run_fails_no_call(idp: OidcProvider) -> None:
    statuses: list[int] = []
    async with gateway_for(idp) as server:
        old = await idp.client_credentials_token(RESOURCE, "tools:read")

        async def calling(token: str, times: int) -> None:
            for _ in range(times):
                statuses.append((await echo(server, token)).status_code)

        async with anyio.create_task_group() as tasks:
            for _ in range(4):
                tasks.start_soon(calling, old, 30)  # calling on while the provider rotates
            await idp.rotate()
            new = await idp.client_credentials_token(RESOURCE, "tools:read")
            for _ in range(4):
                tasks.start_soon(calling, new, 10)  # the new key's first tokens
        async with server.client() as http:
            ready = (await http.get("/readyz")).json()

    assert statuses == [200] * 160
    assert ready["checks"]["keys"].startswith(f"2 key(s) from {idp.jwks_url}")


async def test_an_outage_keeps_the_last_keys_for_a_bounded_time_said_in_readyz(
    idp: OidcProvider, tmp_path: Path
) -> None:
    """The provider is stopped: tokens keep working on the last keys, /readyz says so; past
    keys-max-stale they are refused (503) and the gateway is not ready; back, all is well."""
    token = await idp.client_credentials_token(RESOURCE, "tools:read")
    table = {"keys-refresh": 1, "keys-max-stale": 3}
    async with gateway_for(idp, **table) as server, server.client() as http:
        assert (await echo(server, token)).status_code == 200
        await idp.stop()

        said = await readyz_until(http, lambda body: "cannot be reached" in body["checks"]["keys"])
        assert said["ready"] is True and "serve for" in said["checks"]["keys"]
        assert (await echo(server, token)).status_code == 200  # the last keys still serve

        said = await readyz_until(http, lambda body: body["ready"] is False)
        assert "keys-max-stale (3 s): tokens are refused" in said["checks"]["keys"]
        refused = await echo(server, token)
        assert refused.status_code == 503 and refused.json()["error"] == "keys-unavailable"
        assert refused.headers["retry-after"] == "10"

        await idp.start()
        said = await readyz_until(http, lambda body: body["ready"] is True)
        assert (await echo(server, token)).status_code == 200


async def readyz_until(http: httpx.AsyncClient, done: Any, timeout: float = 30) -> Any:
    """``/readyz``'s body once ``done(body)``: the gateway's own view, read as a probe would."""
    with anyio.fail_after(timeout):
        while True:
            body = (await http.get("/readyz")).json()
            if done(body):
                return body
            await anyio.sleep(0.2)  # a load balancer's probe interval, shortened
