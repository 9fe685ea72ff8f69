"""Signed calls: the gateway vouches for the authenticated user and the groups granted
to the request, and a service that verifies callers sees exactly those."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.gateway.support import RunningGateway, authenticator, serving
from toolbus import running, tool_service
from toolbus.application.identity import (
    CallSigner,
    CallVerifier,
    current_caller,
    generate_key,
    public_jwk,
)
from toolbus.plugins import connect
from toolbus_gateway import Gateway

pytestmark = pytest.mark.anyio

KEY = generate_key(kid="gateway-test")


def _who() -> str:
    caller = current_caller()
    return f"{caller.user}|{','.join(caller.groups)}|{caller.verified}"


def whoami_services() -> tuple[Any, Any]:
    tag = uuid.uuid4().hex[:8]

    @tool_service(
        f"whoami-{tag}",
        request_queue=f"non-persistent://gateway-tests/who/{tag}",
        response_queue=f"non-persistent://gateway-tests/who-r/{tag}",
    )
    async def whoami() -> str:
        return _who()

    @tool_service(
        f"whoami-stream-{tag}",
        request_queue=f"non-persistent://gateway-tests/whos/{tag}",
        response_queue=f"non-persistent://gateway-tests/whos-r/{tag}",
    )
    async def whoami_stream() -> AsyncIterator[str]:
        yield _who()

    return whoami, whoami_stream


def config(whoami: Any, stream: Any) -> dict[str, Any]:
    def tool(name: str, service: Any) -> dict[str, Any]:
        return {
            "type": "tool-service",
            "name": name,
            "description": name,
            "service": service.id,
            "arguments": [],
            "group": ["default", "research"],
        }

    return {
        "tool-service": {s.id: s.descriptor() for s in (whoami, stream)},
        "tool": {"whoami": tool("whoami", whoami), "whoami-stream": tool("whoami-stream", stream)},
        "permissions": {"users": {"alice": ["default"], "bob": ["default", "research"]}},
    }


@pytest.fixture
async def verifying(broker_url: str) -> AsyncIterator[dict[str, Any]]:
    """Services that refuse calls without a token from the gateway's key."""
    services = whoami_services()
    bus = await connect(broker_url)
    try:
        async with running(bus, *services, verifier=CallVerifier([public_jwk(KEY)])):
            yield config(*services)
    finally:
        await bus.close()


@pytest.fixture
async def signed(broker_url: str, verifying: dict[str, Any]) -> AsyncIterator[RunningGateway]:
    gateway = Gateway(
        broker_url,
        authenticator=authenticator(),
        config=verifying,
        signer=CallSigner(KEY, issuer="toolbus-gateway"),
    )
    async with serving(gateway) as served:
        yield served


async def test_a_service_sees_the_user_and_the_granted_groups(signed: RunningGateway) -> None:
    async with signed.client("bob") as bob, signed.client("alice") as alice:
        direct = await bob.post("/v1/tools/whoami/call", json={"groups": ["research"]})
        sid = (await alice.post("/v1/sessions", json={})).json()["session_id"]
        in_session = await alice.post(f"/v1/sessions/{sid}/calls", json={"name": "whoami"})
        streamed = await bob.post(
            "/v1/tools/whoami-stream/stream", json={"groups": ["default", "research"]}
        )
    assert direct.json()["observation"] == "bob|research|True"
    assert in_session.json()["observation"] == "alice|default|True"
    assert "data: bob|default,research|True" in streamed.text


async def test_without_a_signer_a_verifying_service_refuses(
    broker_url: str, verifying: dict[str, Any]
) -> None:
    gateway = Gateway(broker_url, authenticator=authenticator(), config=verifying)
    async with serving(gateway) as served, served.client("alice") as http:
        answer = await http.post("/v1/tools/whoami/call", json={})
    assert answer.status_code == 502
    assert answer.json()["error_type"] == "unauthorized"
