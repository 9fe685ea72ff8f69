"""Logging in to ``toolbus mcp serve`` the way MCP clients do, with a real OpenID provider.

The provider is panva's ``oidc-provider`` (tests/support/oidc.py); the door is
the ``toolbus mcp serve --transport http`` command with ``[mcp.jwt]`` in its
``toolbus.toml``; the clients are the MCP SDK's, with its OAuth support:

* the authorization-code + PKCE flow, found from the door's ``401`` and its
  RFC 9728 metadata, with dynamic client registration, and the provider's
  log-in and consent driven by a headless browser, then tool calls as the user
  the token names; asking for more groups than the token's scopes reach steps
  up to the scope the door's ``403`` names;
* a key rotation at the provider while calls run, with no failed call;
* a token issued for another resource, refused;
* ``toolbus serve mcp`` importing the protected door as a toolset, logged in by
  the client-credentials grant, renewing its tokens before they expire, and
  never printing them.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx
import httpx2
import pytest
from joserfc import jwt
from joserfc.jwk import KeySet
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.server.auth.routes import build_resource_metadata_url
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata
from pydantic import AnyHttpUrl

from tests.doors.processes import door_process
from tests.support.oidc import (
    BRIDGE_CLIENT,
    PUBLIC_CLIENT,
    REDIRECT_URI,
    HeadlessBrowser,
    OidcProvider,
    needs_oidc_provider,
    oidc_provider,
)
from tests.support.servers import free_port, on_free_ports_async
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.identity.credentials import Secret
from toolbus.application.live.registry import LiveRegistry
from toolbus.plugins import connect
from toolbus_mcp.importing.client_credentials import MemoryTokenStorage, RenewingClientCredentials

pytestmark = [pytest.mark.anyio, pytest.mark.slow, needs_oidc_provider]

TOOLBUS = [str(Path(sys.executable).with_name("toolbus"))]
#: The example tools of docs/gateway.md: a joke for everyone, a roast for administrators.
JOKES = {
    "tool-service": {
        "joke-service": {
            "id": "joke-service",
            "request-queue": "non-persistent://tg/request/joke",
            "response-queue": "non-persistent://tg/response/joke",
            "config-params": [{"name": "style"}],
        }
    },
    "tool": {
        "tell-joke": {
            "type": "tool-service",
            "name": "tell-joke",
            "service": "joke-service",
            "description": "Tell a joke on a topic",
            "style": "pun",
            "arguments": [{"name": "topic", "type": "string", "description": "The topic"}],
        },
        "roast": {
            "type": "tool-service",
            "name": "roast",
            "service": "joke-service",
            "description": "Jokes about the team",
            "group": ["admin"],
            "arguments": [{"name": "topic", "type": "string", "description": "Who"}],
        },
    },
}


@dataclass
class Door:
    """A running ``toolbus mcp serve --transport http``."""

    url: str
    base: str
    workdir: Path


@pytest.fixture
def token_ttl() -> int:
    """Seconds the provider's access tokens last (tests that watch renewals shorten it)."""
    return 300


@pytest.fixture
def idp(tmp_path: Path, token_ttl: int) -> Iterator[OidcProvider]:
    with oidc_provider(tmp_path / "idp", access_token_ttl=token_ttl) as provider:
        yield provider


def door_settings(idp: OidcProvider, resource: str, extra: str = "") -> str:
    """The door's toolbus.toml: the provider's tokens for ``resource``, the users' groups."""
    return f"""
config = "config.json"

[mcp.jwt]
issuer = "{idp.issuer}"
discover = true
resource = "{resource}"
{extra}

[mcp.jwt.scopes]
"tools:read" = ["default"]
"tools:admin" = ["*"]

[permissions.users]
alice = ["default", "admin"]
{BRIDGE_CLIENT} = ["default"]
"""


def write_door_files(workdir: Path, idp: OidcProvider, resource: str, extra: str) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "config.json").write_text(json.dumps(JOKES))
    (workdir / "toolbus.toml").write_text(door_settings(idp, resource, extra))


@asynccontextmanager
async def serving_door(workdir: Path, idp: OidcProvider, extra: str = "") -> AsyncIterator[Door]:
    """``toolbus mcp serve --transport http`` on the joke tools, its users the provider's.

    Its resource is its URL, port included, written in toolbus.toml before it starts: the
    port is named (a free one, another where it was taken)."""
    port = 0

    def choose() -> None:
        nonlocal port
        port = free_port()

    @asynccontextmanager
    async def start() -> AsyncIterator[Door]:
        base = f"http://127.0.0.1:{port}"
        write_door_files(workdir, idp, f"{base}/mcp", extra)
        argv = ["mcp", "serve", "--transport", "http", "--listen", f"127.0.0.1:{port}"]
        async with door_process(argv, cwd=workdir, environment={}, http=True):
            yield Door(f"{base}/mcp", base, workdir)

    async with on_free_ports_async(start, choose) as door:
        yield door


@pytest.fixture
async def door(tmp_path: Path, idp: OidcProvider) -> AsyncIterator[Door]:
    async with serving_door(tmp_path / "door", idp) as running:
        yield running


def pkce_client(
    door: Door, browser: HeadlessBrowser, registered_at: OidcProvider | None = None
) -> OAuthClientProvider:
    """The SDK's authorization-code + PKCE flow, registering itself with the provider
    (dynamic client registration), or, ``registered_at`` a provider, as its public client
    registered beforehand."""
    metadata = OAuthClientMetadata(
        redirect_uris=[AnyHttpUrl(REDIRECT_URI)],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
        client_name="toolbus tests",
    )
    storage = MemoryTokenStorage()
    if registered_at is not None:
        storage.client = OAuthClientInformationFull(
            client_id=PUBLIC_CLIENT,
            redirect_uris=[AnyHttpUrl(REDIRECT_URI)],
            grant_types=["authorization_code", "refresh_token"],
            token_endpoint_auth_method="none",
            issuer=registered_at.issuer,
        )
    return OAuthClientProvider(
        door.url,
        metadata,
        storage,
        redirect_handler=browser.redirect,
        callback_handler=browser.callback,
    )


@asynccontextmanager
async def mcp_client(
    door: Door, auth: httpx2.Auth | None, headers: dict[str, str] | None = None, **hooks: Any
) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(
            auth=auth, headers=headers or {}, timeout=30, event_hooks=hooks or None
        ) as http,
        Client(streamable_http_client(door.url, http_client=http)) as client,
    ):
        yield client


def query(url: str) -> dict[str, list[str]]:
    return parse_qs(urlsplit(url).query)


def claims(token: str, idp: OidcProvider) -> dict[str, Any]:
    return jwt.decode(token, KeySet(list(idp.keys))).claims


# ------------------------------------------------------------------ authorization code + PKCE


async def test_an_mcp_client_logs_in_with_pkce_and_calls_as_the_user_its_token_names(
    door: Door, idp: OidcProvider
) -> None:
    browser = HeadlessBrowser(REDIRECT_URI, "alice")
    oauth = pkce_client(door, browser)
    async with mcp_client(door, oauth) as client:
        listed = [tool.name for tool in (await client.list_tools()).tools]
        answer = await client.call_tool("tell-joke", {"topic": "llamas"})

    assert listed == ["tell-joke"]
    assert answer.is_error is False
    assert answer.content[0].text.startswith("Hey alice! Here's a pun")
    [opened] = browser.opened
    asked = query(opened)
    assert asked["code_challenge_method"] == ["S256"] and asked["code_challenge"]
    assert asked["resource"] == [door.url]  # RFC 8707, from the door's metadata
    # The door's 401 named the scope the default group needs, and no more.
    assert "tools:read" in asked["scope"][0].split()
    assert "tools:admin" not in asked["scope"][0].split()
    tokens = oauth.context.current_tokens
    assert tokens is not None
    issued = claims(tokens.access_token, idp)
    assert issued["aud"] == door.url and issued["sub"] == "alice"


async def test_groups_beyond_the_token_s_scopes_step_up_to_the_scope_the_door_names(
    door: Door, idp: OidcProvider
) -> None:
    """A registered client (one that registered itself may ask only for the scopes it
    registered with) steps up from the scope the 401 named to the one the 403 names."""
    browser = HeadlessBrowser(REDIRECT_URI, "alice")
    oauth = pkce_client(door, browser, registered_at=idp)
    async with mcp_client(door, oauth) as reader:
        first = [tool.name for tool in (await reader.list_tools()).tools]
    statuses: list[tuple[int, str]] = []

    async def seen(response: httpx2.Response) -> None:
        if response.url.path == "/mcp":
            statuses.append((response.status_code, response.headers.get("www-authenticate", "")))

    admin = {"Toolbus-Groups": "default,admin"}
    async with mcp_client(door, oauth, admin, response=[seen]) as administrator:
        second = [tool.name for tool in (await administrator.list_tools()).tools]
        roast = await administrator.call_tool("roast", {"topic": "the ops team"})

    assert first == ["tell-joke"]
    assert sorted(second) == ["roast", "tell-joke"]
    assert roast.is_error is False and "alice" in roast.content[0].text
    refused = [header for status, header in statuses if status == 403]
    assert refused and 'error="insufficient_scope"' in refused[0]
    assert 'scope="tools:admin"' in refused[0]
    assert len(browser.opened) == 2
    assert {"tools:read", "tools:admin"} <= set(query(browser.opened[1])["scope"][0].split())


def test_the_door_s_metadata_is_where_the_sdk_looks_for_it() -> None:
    from toolbus.application.identity.bearer import ProtectedResource

    for resource in ("http://127.0.0.1:8000/mcp", "https://tools.example/mcp", "https://t.example"):
        ours = ProtectedResource(resource, ("https://login.example",)).metadata_url
        assert ours == str(build_resource_metadata_url(AnyHttpUrl(resource)))


# ------------------------------------------------------------------ keys and audiences


@pytest.mark.parametrize("token_ttl", [3])
async def test_a_key_rotation_at_the_provider_while_calls_run_fails_no_call(
    door: Door, idp: OidcProvider
) -> None:
    """Tokens last 3 s, so the SDK refreshes them; the provider rotates to a new signing key
    while calls run; the door takes the new key up from the first token it signs."""
    browser = HeadlessBrowser(REDIRECT_URI, "alice")
    oauth = pkce_client(door, browser)
    kids: list[str] = []

    async def sent(request: httpx2.Request) -> None:
        bearer = request.headers.get("authorization", "")
        if request.url.path == "/mcp" and bearer.startswith("Bearer "):
            kids.append(jwt.decode(bearer[7:], KeySet(list(idp.keys))).header["kid"])

    old = idp.signing_kid
    failures: list[str] = []
    calls = 0
    async with mcp_client(door, oauth, request=[sent]) as client:
        new = None
        with anyio.fail_after(60):
            while new is None or kids.count(new) < 3:
                answer = await client.call_tool("tell-joke", {"topic": "keys"})
                calls += 1
                if answer.is_error:
                    failures.append(answer.content[0].text)
                if new is None and calls == 3:
                    new = await idp.rotate()
                await anyio.sleep(0.2)  # a client calling now and then, across token lifetimes

    assert failures == []
    assert old in kids and new in kids
    async with httpx.AsyncClient() as http:
        ready = (await http.get(f"{door.base}/readyz")).json()
    assert ready["ready"] is True and ready["checks"]["keys"].startswith("2 key(s)")


async def test_a_token_issued_for_another_resource_is_refused(
    door: Door, idp: OidcProvider
) -> None:
    elsewhere = await idp.client_credentials_token(f"{door.base}/other", "tools:read")
    here = await idp.client_credentials_token(door.url, "tools:read")
    async with httpx.AsyncClient() as http:
        refused = await http.post(
            door.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {elsewhere}"},
        )
    async with mcp_client(door, None, {"Authorization": f"Bearer {here}"}) as client:
        served = [tool.name for tool in (await client.list_tools()).tools]

    assert refused.status_code == 401
    assert refused.json()["reason"] == "invalid-token"
    assert repr(door.url) in refused.json()["message"]  # which audience it must name
    challenge = refused.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{door.base}/.well-known/oauth-protected-resource/mcp"' in challenge
    assert elsewhere not in refused.text
    assert served == ["tell-joke"]


# ------------------------------------------------------------------ client credentials


@pytest.mark.parametrize("token_ttl", [3])
async def test_client_credentials_tokens_are_renewed_before_they_expire(
    door: Door, idp: OidcProvider
) -> None:
    flow = RenewingClientCredentials(
        door.url,
        issuer=idp.issuer,
        client_id=BRIDGE_CLIENT,
        client_secret=Secret(idp.client_secret),
    )
    statuses: list[int] = []

    async def seen(response: httpx2.Response) -> None:
        if response.url.path == "/mcp":
            statuses.append(response.status_code)

    answers = []
    async with mcp_client(door, flow, response=[seen]) as client:
        with anyio.fail_after(60):
            while flow.tokens_received < 3:
                answers.append(await client.call_tool("tell-joke", {"topic": "time"}))
                await anyio.sleep(0.2)  # calls spread over several token lifetimes

    assert all(not answer.is_error for answer in answers)
    assert answers[0].content[0].text.startswith(f"Hey {BRIDGE_CLIENT}!")
    assert statuses.count(401) == 1  # the first request, which found how to log in
    assert flow.tokens_received >= 3


async def test_an_imported_server_that_wants_oauth_is_served_on_the_bus(
    door: Door, idp: OidcProvider, live_nats: str, tmp_path: Path
) -> None:
    """``toolbus serve mcp`` gets its tokens by the client-credentials grant, and nothing
    it prints (with --verbose) holds the secret or a token."""
    argv = [*TOOLBUS, "serve", "mcp", "--toolset", "jokes", "--url", door.url, "--verbose"]
    argv += ["--oauth-issuer", idp.issuer, "--oauth-scope", "tools:read"]
    argv += ["--oauth-client-id", "JOKES_CLIENT_ID"]
    argv += ["--oauth-client-secret", "JOKES_CLIENT_SECRET", "--broker", live_nats]
    environment = {
        **os.environ,
        "JOKES_CLIENT_ID": BRIDGE_CLIENT,
        "JOKES_CLIENT_SECRET": idp.client_secret,
    }
    printed = tmp_path / "bridge.log"
    bus = await connect(live_nats)
    try:
        with printed.open("wb") as out:
            bridge = await anyio.open_process(argv, stdout=out, stderr=out, env=environment)
        async with (
            bridge,
            ToolServiceClient(bus, default_timeout=30) as client,
            LiveRegistry(bus, follow_config=False) as live,
        ):
            await live.wait_until(lambda registry: "jokes_tell-joke" in registry.tools, timeout=60)
            answer = await live.tools(client).call("jokes_tell-joke", {"topic": "buses"})
            bridge.terminate()
            with anyio.fail_after(30):
                await bridge.wait()
    finally:
        await bus.close()

    output = await anyio.Path(printed).read_text()
    assert answer.startswith(f"Hey {BRIDGE_CLIENT}!")  # the door's user: the bridge's client
    assert "connected to MCP toolset jokes" in output
    assert idp.client_secret not in output
    assert "eyJ" not in output  # no JWT (header, claims or whole) was printed
