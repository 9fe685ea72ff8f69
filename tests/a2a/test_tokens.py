"""``toolbus a2a serve`` with ``[a2a.jwt]``: an identity provider's access tokens log callers
in beside the API keys, as at the gateway and the MCP door; their scopes hold for the
groups a message asks for. Tokens signed with a shared secret (HS256), spoken to by
a2a-sdk's client over real HTTP."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from a2a.client import Client, ClientConfig, create_client
from a2a.types import GetTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict
from joserfc import jwt
from joserfc.jwk import OctKey

from tests.a2a.conftest import AGENT, KEYS, A2ASite, calling, message
from tests.support.model_server import ModelServer

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

SECRET = "a2a-token-secret-0123456789abcdef0123456789"
ISSUER = "https://login.example/realms/tools"
RESOURCE = "https://agents.example"
TOKENS = f"""
[a2a.jwt]
secret-env = "A2A_JWT_SECRET"
issuer = "{ISSUER}"
resource = "{RESOURCE}"
scopes = {{ "tools:read" = ["default"], "tools:admin" = ["*"] }}
"""


def token(**claims: Any) -> str:
    body = {"sub": "alice", "iss": ISSUER, "aud": RESOURCE, "exp": int(time.time()) + 300}
    body.update(claims)
    return jwt.encode({"alg": "HS256"}, body, OctKey.import_key(SECRET))


@pytest.fixture(scope="module")
async def site(
    a2a_nats: str, model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[A2ASite]:
    site = A2ASite(tmp_path_factory.mktemp("a2a-tokens"), a2a_nats, extra=TOKENS)
    site.environment["A2A_JWT_SECRET"] = SECRET
    async with site.tools(), site.agent(model_server):
        yield site


@pytest.fixture(scope="module")
async def door(site: A2ASite) -> AsyncIterator[str]:
    async with site.door() as (_, url):
        yield url


@asynccontextmanager
async def client_with(url: str, bearer: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {bearer}"}
    async with httpx.AsyncClient(headers=headers, timeout=90) as http:
        config = ClientConfig(httpx_client=http, streaming=False)
        client = await create_client(url, client_config=config)
        try:
            yield client
        finally:
            await client.close()


async def test_a_token_calls_as_the_user_it_names(
    door: str, site: A2ASite, model_server: ModelServer
) -> None:
    key = uuid.uuid4().hex
    site.let_go(key)
    model_server.play(calling("hold", key))
    async with client_with(door, token(scope="tools:read")) as client:
        [answered] = [r async for r in client.send_message(message("Who am I?"))]
    async with client_with(door, KEYS["alice"]) as client:
        read = await client.get_task(GetTaskRequest(id=answered.task.id))

    assert answered.task.status.state == TaskState.TASK_STATE_COMPLETED
    said = [p.text for m in answered.task.history for p in m.parts]
    assert f"held {key} for alice" in said
    assert read.id == answered.task.id  # alice's own task, whichever way she logs in


async def test_groups_beyond_the_token_s_scopes_are_rejected_naming_the_scope(
    door: str,
) -> None:
    request = message("Reset it all")
    request.message.metadata.update({"toolbus": {"groups": ["admin"]}})
    async with client_with(door, token(scope="tools:read")) as client:
        [answered] = [r async for r in client.send_message(request)]

    status = answered.task.status
    assert status.state == TaskState.TASK_STATE_REJECTED
    assert "'admin'" in status.message.parts[0].text
    assert "'tools:admin'" in status.message.parts[0].text
    assert MessageToDict(status.message.metadata)["toolbus"]["error"] == "insufficient-scope"


async def test_a_refused_token_is_told_where_to_log_in(door: str) -> None:
    async with httpx.AsyncClient() as http:
        expired = await http.post(
            f"{door}/agents/{AGENT}/rest/message:send",
            json={"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER"}},
            headers={"Authorization": f"Bearer {token(exp=int(time.time()) - 3600)}"},
        )
        metadata = await http.get(f"{door}/.well-known/oauth-protected-resource")
        card = await http.get(f"{door}/.well-known/agent-card.json")

    assert expired.status_code == 401 and expired.json()["reason"] == "expired", expired.text
    challenge = expired.headers["www-authenticate"]
    assert 'resource_metadata="https://agents.example/.well-known/oauth-protected-resource"' in (
        challenge
    )
    assert 'error="invalid_token"' in challenge
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == RESOURCE
    assert metadata.json()["authorization_servers"] == [ISSUER]
    schemes = card.json()["securitySchemes"]
    assert schemes["bearer"]["httpAuthSecurityScheme"]["bearerFormat"] == "JWT"
    assert schemes["openid"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == (
        f"{ISSUER}/.well-known/openid-configuration"
    )
