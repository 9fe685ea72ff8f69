"""A signed call sent again under a retry policy is served as an unsigned one is.

A retry reuses the call id; its fresh token names its ``attempt``, so the
replay guard of an at-most-once queue tells it from a copy of the first try.
"""

from __future__ import annotations

import uuid
from contextlib import AsyncExitStack

import pytest

from toolbus import ToolServiceClient, running, tool_service
from toolbus.application.calls.retries import RetryPolicy
from toolbus.application.calls.service import FunctionToolService
from toolbus.application.identity import CallVerifier
from toolbus.domain.calls import wire
from toolbus.domain.errors import Unavailable
from toolbus.domain.identity import PROP_CALL_TOKEN
from toolbus.ports import Bus
from toolbus.testing.conformance import fresh_queue

from .support import WAIT, key_pair, raw_exchange

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002, idempotent=True)


def warming_up(persistent: bool, failures: int = 1) -> tuple[FunctionToolService, list[str]]:
    """A tool that is unavailable for its first ``failures`` calls; records who it served."""
    served: list[str] = []

    @tool_service(
        f"warming-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(persistent, kind="request"),
        response_queue=fresh_queue(kind="response"),
    )
    async def service(text: str) -> str:
        served.append(text)
        if len(served) <= failures:
            raise Unavailable("warming up; try again")
        return f"done: {text}"

    return service, served


@pytest.mark.parametrize("persistent", [False, True], ids=["at-most-once", "at-least-once"])
@pytest.mark.parametrize("signed", [False, True], ids=["unsigned", "signed"])
async def test_a_retry_after_unavailable_is_served_signed_or_not(
    bus: Bus, persistent: bool, signed: bool
) -> None:
    gateway = key_pair()
    service, served = warming_up(persistent)
    verifier = CallVerifier([gateway.public]) if signed else None
    signer = gateway.signer() if signed else None
    async with (
        running(bus, service, verifier=verifier),
        ToolServiceClient(bus, signer=signer, retry=QUICK) as client,
    ):
        answer = await client.call(
            service=service.id,
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="alice",
            arguments={"text": "hi"},
            timeout=WAIT,
        )
    assert answer == "done: hi"
    assert served == ["hi", "hi"]


async def test_a_copy_of_a_tries_token_is_still_a_replay(bus: Bus) -> None:
    """The attempt number is covered by the token: a copy of any one try is refused."""
    gateway = key_pair()
    service, served = warming_up(False, failures=0)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(
            running(bus, service, verifier=CallVerifier([gateway.public]))
        )
        send = await stack.enter_async_context(raw_exchange(bus, service))
        body = wire.encode_request("alice", arguments={"text": "hi"})
        signer = gateway.signer()
        answers = []
        for attempt in ("2", "2", "3"):
            properties = {"id": "call-1", wire.PROP_ATTEMPT: attempt}
            token = signer.sign(
                call_id="call-1",
                audience=service.id,
                user="alice",
                body=body,
                properties=properties,
            )
            answers.append(await send(body, {**properties, PROP_CALL_TOKEN: token}))
        # A second try's token with its attempt changed on the way: not covered.
        forged = {"id": "call-1", wire.PROP_ATTEMPT: "4", PROP_CALL_TOKEN: token}
        answers.append(await send(body, forged))
    assert [a.error_type for a in answers] == [None, "unauthorized", None, "unauthorized"]
    assert "used before" in answers[1].error_message
    assert "does not cover the call's properties" in answers[3].error_message
    assert served == ["hi", "hi"]
