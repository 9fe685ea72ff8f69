"""Signed calls on real buses: who may call, what the tool sees, and every refusal.

Each refusal is an ``unauthorized`` answer with the tool never run, counted in
the service's metrics and logged without the token.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

import toolbus
from toolbus import AgentSession, load_registry, open_tools
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import FunctionToolService
from toolbus.application.identity import Caller, CallSigner, CallVerifier, granting
from toolbus.domain.calls import wire
from toolbus.domain.errors import ToolCallError, Unauthorized
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus

from .support import WAIT, KeyPair, WhoAmI, key_pair, raw_exchange, whoami

pytestmark = pytest.mark.anyio


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def call(
    stack: AsyncExitStack,
    bus: Bus,
    service: FunctionToolService,
    signer: CallSigner | None,
    user: str = "alice",
    **options: Any,
) -> str:
    client = await stack.enter_async_context(ToolServiceClient(bus, signer=signer))
    return await client.call(
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        service=options.pop("service", service.id),
        user=user,
        timeout=WAIT,
        **options,
    )


async def serve(stack: AsyncExitStack, bus: Bus, tool: WhoAmI, *keys: KeyPair, **host: Any) -> None:
    if keys:
        host.setdefault("verifier", CallVerifier([k.public for k in keys]))
    await stack.enter_async_context(running(bus, tool.service, **host))


async def test_a_signed_call_reaches_the_tool_with_the_verified_caller(
    bus: Bus, stack: AsyncExitStack
) -> None:
    gateway = key_pair()
    tool = whoami()
    await serve(stack, bus, tool, gateway)
    signer = gateway.signer(groups=["read"])
    assert await call(stack, bus, tool.service, signer) == "alice read verified=True"
    with granting(["read", "write"]):
        assert await call(stack, bus, tool.service, signer) == "alice read,write verified=True"
    assert tool.served[0] == Caller("alice", ("read",), True, str(gateway.private.kid))


@pytest.mark.parametrize("algorithm", ["Ed25519", "ES256", "HS256"])
async def test_every_algorithm_signs_and_verifies(
    bus: Bus, stack: AsyncExitStack, algorithm: str
) -> None:
    keys = key_pair(algorithm)
    tool = whoami()
    await serve(stack, bus, tool, keys)
    assert await call(stack, bus, tool.service, keys.signer()) == "alice  verified=True"


async def test_an_unverifying_service_serves_the_claimed_user_unverified(
    bus: Bus, stack: AsyncExitStack, caplog: pytest.LogCaptureFixture
) -> None:
    tool = whoami()
    await serve(stack, bus, tool)
    assert await call(stack, bus, tool.service, None) == "alice  verified=False"
    # A signed call to it works too, and says once that nobody checks the tokens.
    signer = key_pair().signer()
    with caplog.at_level(logging.WARNING, logger="toolbus"):
        for _ in range(2):
            assert await call(stack, bus, tool.service, signer) == "alice  verified=False"
    warnings = [r.getMessage() for r in caplog.records if "verifies no tokens" in r.getMessage()]
    assert len(warnings) == 1
    assert "--verify-key" in warnings[0]


class Lying(CallSigner):
    """Signs claims that differ from the call it is put on."""

    def __init__(self, key: Any, **lie: str) -> None:
        super().__init__(key)
        self.lie = lie

    def sign(self, **call: Any) -> str:
        return super().sign(**{**call, **self.lie})


def refusals(registry: CollectorRegistry, service: str) -> float | None:
    return registry.get_sample_value(
        "toolbus_service_call_errors_total", {"service": service, "error_type": "unauthorized"}
    )


async def test_an_unsigned_call_is_refused_where_tokens_are_required(
    bus: Bus, stack: AsyncExitStack
) -> None:
    tool = whoami()
    await serve(stack, bus, tool, key_pair())
    with pytest.raises(Unauthorized, match=r"carries no call token.*TrustGraph"):
        await call(stack, bus, tool.service, None)
    assert tool.served == []


@pytest.mark.parametrize(
    ("make_signer", "reason"),
    [
        (lambda own, other: own.signer(clock=lambda: 1_000_000_000.0), "expired"),
        (lambda own, other: own.signer(clock=lambda: 4_000_000_000.0), "not valid yet"),
        (lambda own, other: Lying(own.private, audience="another-service"), "another tool"),
        (lambda own, other: Lying(own.private, call_id=str(uuid.uuid4())), "another call id"),
        (lambda own, other: Lying(own.private, body=b"{}"), "another request body"),
        (lambda own, other: Lying(own.private, user="root"), "the call token is for 'root'"),
        (lambda own, other: other.signer(), "unknown key"),
    ],
    ids=["expired", "not-yet-valid", "other-tool", "other-call", "other-body", "user", "key"],
)
async def test_each_invalid_token_is_refused_counted_and_logged_without_the_token(
    bus: Bus,
    stack: AsyncExitStack,
    caplog: pytest.LogCaptureFixture,
    make_signer: Any,
    reason: str,
) -> None:
    own, stranger = key_pair(), key_pair()
    tool = whoami()
    registry = CollectorRegistry()
    await serve(stack, bus, tool, own, metrics=ToolbusMetrics(registry))
    signer = make_signer(own, stranger)
    tokens: list[str] = []
    sign = signer.sign
    signer.sign = lambda **c: tokens.append(sign(**c)) or tokens[-1]  # type: ignore[method-assign]
    with (
        caplog.at_level(logging.DEBUG, logger="toolbus"),
        pytest.raises(Unauthorized, match=reason) as refused,
    ):
        await call(stack, bus, tool.service, signer)
    assert refused.value.error_type == "unauthorized"
    assert tool.served == []
    assert refusals(registry, tool.service.id) == 1
    assert any(reason in r.getMessage() for r in caplog.records)
    (token,) = tokens
    for piece in token.split("."):
        assert piece not in caplog.text
        assert piece not in refused.value.message


async def test_a_forged_user_in_the_body_is_refused(bus: Bus, stack: AsyncExitStack) -> None:
    gateway = key_pair()
    tool = whoami()
    await serve(stack, bus, tool, gateway)
    # A real token of alice's, copied onto a request that claims to be root's.
    genuine = gateway.signer().sign(call_id="c-1", audience=tool.service.id, user="alice", body=b"")
    async with raw_exchange(bus, tool.service) as send:
        answer = await send(wire.encode_request("root"), {"id": "c-1", PROP_CALL_TOKEN: genuine})
    assert answer.error_type == "unauthorized"
    assert tool.served == []


async def test_two_keys_live_at_once_let_signers_rotate(bus: Bus, stack: AsyncExitStack) -> None:
    old, new = key_pair(kid="gateway-2026-10"), key_pair(kid="gateway-2026-11")
    tool = whoami()
    await serve(stack, bus, tool, old, new)
    assert await call(stack, bus, tool.service, old.signer()) == "alice  verified=True"
    assert await call(stack, bus, tool.service, new.signer()) == "alice  verified=True"
    assert [c.key_id for c in tool.served] == ["gateway-2026-10", "gateway-2026-11"]

    # The old key retired: its tokens are refused, the new key's still work.
    retired = whoami()
    await serve(stack, bus, retired, new)
    with pytest.raises(Unauthorized, match="unknown key"):
        await call(stack, bus, retired.service, old.signer())
    assert await call(stack, bus, retired.service, new.signer()) == "alice  verified=True"


async def test_a_token_replayed_on_another_call_is_refused(bus: Bus, stack: AsyncExitStack) -> None:
    gateway = key_pair()
    tool = whoami()
    await serve(stack, bus, tool, gateway)
    body = wire.encode_request("alice")
    token = gateway.signer().sign(call_id="c-1", audience=tool.service.id, user="alice", body=body)
    async with raw_exchange(bus, tool.service) as send:
        first = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
        other_call = await send(body, {"id": "c-2", PROP_CALL_TOKEN: token})
        same_again = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
    assert first.error_type is None
    assert (other_call.error_type, other_call.error_message) == (
        "unauthorized",
        "call token is for another call id",
    )
    # At most once: the same call twice on a non-persistent queue is a replay.
    assert same_again.error_type == "unauthorized"
    assert "used before" in same_again.error_message
    assert len(tool.served) == 1


async def test_the_same_call_redelivered_on_a_persistent_queue_is_answered_again(
    bus: Bus, stack: AsyncExitStack
) -> None:
    gateway = key_pair()
    tool = whoami(persistent=True)
    await serve(stack, bus, tool, gateway)
    body = wire.encode_request("alice")
    token = gateway.signer().sign(call_id="c-1", audience=tool.service.id, user="alice", body=body)
    async with raw_exchange(bus, tool.service) as send:
        first = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
        again = await send(body, {"id": "c-1", PROP_CALL_TOKEN: token})
    assert first == again
    assert first.response == "alice  verified=True"
    assert len(tool.served) == 1  # answered from memory, not run twice


async def test_trustgraph_callers_are_refused_clearly_or_served(
    bus: Bus, stack: AsyncExitStack
) -> None:
    """A TrustGraph client sends the plain envelope with an id and nothing else."""
    strict, lenient, open_ = whoami(), whoami(), whoami()
    keys = key_pair()
    await serve(stack, bus, strict, keys)
    await serve(stack, bus, lenient, verifier=CallVerifier([keys.public], required=False))
    await serve(stack, bus, open_)
    request = b'{"user": "trustgraph", "config": "{}", "arguments": "{}"}'
    answers = []
    for tool in (strict, lenient, open_):
        async with raw_exchange(bus, tool.service) as send:
            answers.append(await send(request, {"id": str(uuid.uuid4())}))
    refused, *served = answers
    assert refused.error_type == "unauthorized"
    assert "TrustGraph callers cannot" in refused.error_message
    assert [a.response for a in served] == ["trustgraph  verified=False"] * 2
    # The lenient service still refuses a bad token: only its absence is allowed.
    with pytest.raises(ToolCallError, match="unknown key"):
        await call(stack, bus, lenient.service, key_pair().signer())


async def test_an_agent_session_signs_its_calls_with_the_groups_it_was_granted() -> None:
    gateway = key_pair()
    tool = whoami()
    registry = load_registry(
        {
            "tool-service": {tool.service.id: tool.service.descriptor()},
            "tool": {
                "whoami": {
                    "type": "tool-service",
                    "name": "whoami",
                    "description": "who is calling",
                    "service": tool.service.id,
                    "group": ["support"],
                }
            },
        }
    )
    broker = f"memory://signed-{uuid.uuid4().hex[:8]}"
    bus = await toolbus.connect(broker)
    verifier = CallVerifier([gateway.public])
    async with (
        running(bus, tool.service, verifier=verifier),
        open_tools(broker, registry, signer=gateway.signer()) as tools,
        AgentSession(tools, user="alice", groups=["support"]) as session,
    ):
        outcome = await session.call("whoami", {}, tool_call_id="t1")
    await bus.close()
    assert outcome.observation == "alice support verified=True"
