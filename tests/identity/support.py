"""Keys, a service that reports who called it, and raw publishing for forged requests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.application.identity import Caller, CallSigner, generate_key, public_jwk
from toolbus.domain.calls import wire
from toolbus.ports import Bus
from toolbus.testing.conformance import fresh_queue, next_delivery

WAIT = 10.0


@dataclass
class KeyPair:
    """A private key for a signer, and the public JWK a service trusts."""

    private: Any
    public: dict[str, Any]

    def signer(self, **options: Any) -> CallSigner:
        return CallSigner(self.private, **options)


def key_pair(algorithm: str = "Ed25519", kid: str | None = None) -> KeyPair:
    key = generate_key(algorithm, kid or f"{algorithm.lower()}-{uuid.uuid4().hex[:6]}")
    return KeyPair(key, public_jwk(key))


@dataclass
class WhoAmI:
    """A tool service that records every caller it served."""

    service: FunctionToolService
    served: list[Caller] = field(default_factory=list)


def whoami(persistent: bool = False) -> WhoAmI:
    record = WhoAmI.__new__(WhoAmI)
    record.served = []

    @tool_service(
        f"whoami-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(persistent, kind="request"),
        response_queue=fresh_queue(kind="response"),
    )
    async def service(caller: Caller) -> str:
        record.served.append(caller)
        return f"{caller.user} {','.join(caller.groups)} verified={caller.verified}"

    record.service = service
    return record


@asynccontextmanager
async def raw_exchange(bus: Bus, service: FunctionToolService) -> AsyncIterator[Any]:
    """Publish hand-made requests to ``service`` and read its answers."""
    answers = await bus.subscribe(service.response_queue)

    async def send(body: bytes, properties: Mapping[str, str]) -> wire.ToolResponse:
        await bus.publish(service.request_queue, body, dict(properties))
        while True:
            delivery = await next_delivery(answers, WAIT)
            await delivery.ack()
            if delivery.properties.get("id") == properties.get("id"):
                return wire.decode_response(delivery.body)

    try:
        yield send
    finally:
        await answers.close()
