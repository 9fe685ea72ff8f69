"""Both HTTP doors log callers in the same way, from one ``toolbus.toml``, with a real provider.

``toolbus gateway`` and ``toolbus mcp serve --transport http`` run as the
commands, on NATS, beside the joke service; ``[gateway.jwt]`` and
``[mcp.jwt]`` name the same identity provider (panva's ``oidc-provider``),
its keys discovered from its issuer, each door its own resource. Every case
is asked of both doors, and both answer it alike: the RFC 9728 metadata, the
``401`` that names it, a token for the other door refused, scopes that do not
reach the groups asked for (``403 insufficient_scope``), the provider's tokens
calling as the user they name, and ``/readyz`` saying where the keys come from.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import ProtectedResourceMetadata

from tests.doors.processes import door_process
from tests.nats.server import NatsServer
from tests.support.oidc import BRIDGE_CLIENT, OidcProvider, needs_oidc_provider, oidc_provider
from tests.support.servers import free_port, on_free_ports_async
from toolbus.application.calls.host import running
from toolbus.plugins import connect
from toolbus_joke import joke_service

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker, needs_oidc_provider]

TOOLS = {
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
    """One running door: where it is, what it calls itself to OAuth clients."""

    name: str
    base: str
    resource: str
    metadata_path: str

    async def ask(self, token: str | None, groups: str | None = None) -> httpx.Response:
        """A request that must pass the door's log-in: a tool list, for ``groups``."""
        headers = {} if token is None else {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(timeout=30) as http:
            if self.name == "gateway":
                params = {} if groups is None else {"groups": groups}
                return await http.get(f"{self.base}/v1/tools", params=params, headers=headers)
            if groups is not None:
                headers["Toolbus-Groups"] = groups
            return await http.post(
                self.resource, json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers=headers
            )

    async def tell_joke(self, token: str) -> str:
        """Call ``tell-joke`` as the caller ``token`` names; the observation."""
        bearer = {"Authorization": f"Bearer {token}"}
        if self.name == "gateway":
            async with httpx.AsyncClient(timeout=30) as http:
                answer = await http.post(
                    f"{self.base}/v1/tools/tell-joke/call",
                    json={"arguments": {"topic": "tokens"}},
                    headers=bearer,
                )
            assert answer.status_code == 200, answer.text
            observation: str = answer.json()["observation"]
            return observation
        async with (
            httpx2.AsyncClient(headers=bearer, timeout=30) as http,
            Client(streamable_http_client(self.resource, http_client=http)) as client,
        ):
            result = await client.call_tool("tell-joke", {"topic": "tokens"})
        assert not result.is_error
        text: str = result.content[0].text  # type: ignore[union-attr]
        return text


@dataclass
class Doors:
    idp: OidcProvider
    gateway: Door
    mcp: Door

    def __getitem__(self, name: str) -> Door:
        door: Door = getattr(self, name)
        return door

    def other(self, name: str) -> Door:
        return self.mcp if name == "gateway" else self.gateway


def token_table(idp: OidcProvider, resource: str) -> str:
    return f"""issuer = "{idp.issuer}"
discover = true
resource = "{resource}"
scopes = {{ "tools:read" = ["default"], "tools:admin" = ["*"] }}
"""


def write_settings(workdir: Path, settings: str) -> None:
    (workdir / "config.json").write_text(json.dumps(TOOLS))
    (workdir / "toolbus.toml").write_text(settings)


def the_doors(idp: OidcProvider, gateway_port: int, mcp_port: int) -> tuple[Door, Door]:
    gateway = Door(
        "gateway",
        f"http://127.0.0.1:{gateway_port}",
        f"http://127.0.0.1:{gateway_port}",
        "/.well-known/oauth-protected-resource",
    )
    mcp = Door(
        "mcp",
        f"http://127.0.0.1:{mcp_port}",
        f"http://127.0.0.1:{mcp_port}/mcp",
        "/.well-known/oauth-protected-resource/mcp",
    )
    return gateway, mcp


@pytest.fixture(scope="module")
async def doors(
    identity_nats: NatsServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Doors]:
    live_nats = identity_nats.url
    workdir = tmp_path_factory.mktemp("oauth-doors")
    # Each door's resource is its own URL, port included, written in toolbus.toml before
    # it starts: the ports are named (free ones, others where one was taken).
    ports = {"gateway": 0, "mcp": 0}

    def choose() -> None:
        ports.update(gateway=free_port(), mcp=free_port())

    @asynccontextmanager
    async def started(idp: OidcProvider) -> AsyncIterator[Doors]:
        gateway, mcp = the_doors(idp, ports["gateway"], ports["mcp"])
        write_settings(
            workdir,
            f"""broker = "{live_nats}"
config = "config.json"

[gateway]
listen = "127.0.0.1:{ports["gateway"]}"

[gateway.jwt]
{token_table(idp, gateway.resource)}
[mcp.jwt]
{token_table(idp, mcp.resource)}
[permissions.users]
alice = ["default", "admin"]
{BRIDGE_CLIENT} = ["default"]
""",
        )
        mcp_args = ["mcp", "serve", "--transport", "http", "--listen", mcp.base[7:]]
        async with (
            door_process(["gateway"], cwd=workdir, environment={}, http=True),
            door_process(mcp_args, cwd=workdir, environment={}, http=True),
        ):
            yield Doors(idp, gateway, mcp)

    with oidc_provider(workdir / "idp") as idp:
        bus = await connect(live_nats)
        try:
            async with (
                running(bus, joke_service),
                on_free_ports_async(lambda: started(idp), choose) as doors,
            ):
                yield doors
        finally:
            await bus.close()


DOORS = pytest.mark.parametrize("door", ["gateway", "mcp"])


@DOORS
async def test_each_door_publishes_how_to_log_in(doors: Doors, door: str) -> None:
    served = doors[door]
    browser = {"Origin": "https://mcp-client.example"}  # a client in a web page reads it too
    async with httpx.AsyncClient(headers=browser) as http:
        answer = await http.get(served.base + served.metadata_path)
        bare = await http.get(served.base + "/.well-known/oauth-protected-resource")
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    ProtectedResourceMetadata.model_validate(document)  # what MCP clients read it as
    assert document["resource"] == served.resource
    assert document["authorization_servers"] == [doors.idp.issuer]
    assert document["scopes_supported"] == ["tools:read", "tools:admin"]
    assert document["bearer_methods_supported"] == ["header"]
    assert answer.headers["cache-control"] == "public, max-age=3600"
    assert answer.headers["access-control-allow-origin"] == "*"
    assert bare.json() == document


@DOORS
async def test_a_request_without_a_token_is_told_where_to_log_in(doors: Doors, door: str) -> None:
    served = doors[door]
    answer = await served.ask(None)
    assert answer.status_code == 401
    assert answer.json()["error"] == "unauthenticated" and answer.json()["reason"] == "missing"
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="toolbus", resource_metadata="')
    assert f'resource_metadata="{served.base}{served.metadata_path}"' in challenge


@DOORS
async def test_the_provider_s_tokens_call_as_the_user_they_name(doors: Doors, door: str) -> None:
    served = doors[door]
    token = await doors.idp.client_credentials_token(served.resource, "tools:read")
    assert (await served.tell_joke(token)).startswith(f"Hey {BRIDGE_CLIENT}!")


@DOORS
async def test_a_token_for_the_other_door_is_refused(doors: Doors, door: str) -> None:
    served = doors[door]
    token = await doors.idp.client_credentials_token(doors.other(door).resource, "tools:read")
    answer = await served.ask(token)
    assert answer.status_code == 401
    assert answer.json()["reason"] == "invalid-token"
    assert repr(served.resource) in answer.json()["message"]
    assert 'error="invalid_token"' in answer.headers["www-authenticate"]
    assert token not in answer.text


@DOORS
async def test_groups_beyond_the_token_s_scopes_are_403_naming_the_scope(
    doors: Doors, door: str
) -> None:
    served = doors[door]
    reader = await doors.idp.client_credentials_token(served.resource, "tools:read")
    answer = await served.ask(reader, "default,admin")
    assert answer.status_code == 403
    assert answer.json()["error"] == "insufficient-scope"
    assert answer.json()["scopes"] == ["tools:admin"]
    challenge = answer.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="tools:admin"' in challenge
    assert f'resource_metadata="{served.base}{served.metadata_path}"' in challenge


@DOORS
async def test_readyz_says_where_the_keys_come_from(doors: Doors, door: str) -> None:
    async with httpx.AsyncClient() as http:
        answer = await http.get(doors[door].base + "/readyz")
    assert answer.status_code == 200
    assert answer.json()["checks"]["keys"].startswith(f"1 key(s) from {doors.idp.jwks_url}")
