"""The properties that steer a call ride under the token: nobody on the way can change them.

``env-args`` decides which of the service's environment values fill which
arguments; ``deadline`` how long the caller waits (and so whether the call
runs at all). A genuine signed call republished with either added, dropped or
changed is refused, and the tool does not run.
"""

from __future__ import annotations

import json
import time
import uuid
from contextlib import AsyncExitStack
from typing import Any

import pytest

from toolbus import ToolServiceClient, running, tool_service
from toolbus.application.calls.service import FunctionToolService
from toolbus.application.identity import CallVerifier
from toolbus.domain.calls import wire
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus
from toolbus.testing.conformance import fresh_queue

from .support import WAIT, key_pair, raw_exchange

pytestmark = pytest.mark.anyio


def mailer(sent: list[dict[str, Any]]) -> FunctionToolService:
    """A tool that may be given the service's SMTP password from its environment."""

    @tool_service(
        f"mailer-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(kind="request"),
        response_queue=fresh_queue(kind="response"),
        env_params=["SMTP_PASSWORD"],
    )
    async def service(to: str, password: str = "") -> str:
        sent.append({"to": to, "password": password})
        return f"sent to {to}"

    return service


def tampered(properties: dict[str, str], change: str) -> dict[str, str]:
    changed = dict(properties)
    if change == "env-args added":
        changed[wire.PROP_ENV_ARGS] = json.dumps({"to": "SMTP_PASSWORD"})
    elif change == "deadline extended":
        changed[wire.PROP_DEADLINE] = f"{time.time() + 86_400:.3f}"
    elif change == "deadline dropped":
        del changed[wire.PROP_DEADLINE]
    return changed


@pytest.mark.parametrize("change", ["env-args added", "deadline extended", "deadline dropped"])
async def test_a_signed_call_with_a_steering_property_changed_is_refused(
    bus: Bus, change: str
) -> None:
    gateway = key_pair()
    sent: list[dict[str, Any]] = []
    service = mailer(sent)
    environ = {"SMTP_PASSWORD": "hunter2-very-secret"}
    body = wire.encode_request("alice", arguments={"to": "bob@example.com"})
    properties = {"id": "call-1", wire.PROP_DEADLINE: f"{time.time() + 30:.3f}"}
    token = gateway.signer().sign(
        call_id="call-1", audience=service.id, user="alice", body=body, properties=properties
    )
    async with AsyncExitStack() as stack:
        verifier = CallVerifier([gateway.public])
        await stack.enter_async_context(running(bus, service, verifier=verifier, environ=environ))
        send = await stack.enter_async_context(raw_exchange(bus, service))
        answer = await send(body, {**tampered(properties, change), PROP_CALL_TOKEN: token})
    assert answer.error_type == "unauthorized"
    assert "does not cover the call's properties" in answer.error_message
    assert sent == []


async def test_steering_properties_the_caller_set_reach_the_tool(bus: Bus) -> None:
    """The signing client covers the ``env-args`` its tool options asked for."""
    gateway = key_pair()
    sent: list[dict[str, Any]] = []
    service = mailer(sent)
    environ = {"SMTP_PASSWORD": "hunter2-very-secret"}
    async with (
        running(bus, service, verifier=CallVerifier([gateway.public]), environ=environ),
        ToolServiceClient(bus, signer=gateway.signer()) as client,
    ):
        answer = await client.call(
            service=service.id,
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="alice",
            arguments={"to": "bob@example.com"},
            properties={wire.PROP_ENV_ARGS: json.dumps({"password": "SMTP_PASSWORD"})},
            timeout=WAIT,
        )
    assert answer == "sent to bob@example.com"
    assert sent == [{"to": "bob@example.com", "password": "hunter2-very-secret"}]
