"""Unexpected exceptions answer with a reference; their text goes to the log only.

A tool's deliberate errors (``ToolCallError`` and its typed subclasses) answer
with their message, as TrustGraph writes it (``str(e)``).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import pytest

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.domain.errors import NotFound, ToolCallError, ToolServiceError
from toolbus.ports import Bus
from toolbus.testing.conformance import fresh_queue

from .support import WAIT

pytestmark = pytest.mark.anyio

REFERENCE = re.compile(r"\(ref ([0-9a-f]{12})\)")


def leaky(secret: str) -> FunctionToolService:
    @tool_service(
        f"leaky-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(kind="request"),
        response_queue=fresh_queue(kind="response"),
    )
    async def service(mode: str) -> Any:
        if mode == "crash":
            raise ValueError(f"cannot connect to postgres://app:{secret}@db/app")
        if mode == "not-found":
            raise NotFound("no customer 42")
        raise ToolCallError("slow down", error_type="rate-limited")

    return service


async def call(bus: Bus, service: FunctionToolService, mode: str) -> ToolCallError:
    async with ToolServiceClient(bus) as client:
        with pytest.raises(ToolCallError) as caught:
            await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                arguments={"mode": mode},
                timeout=WAIT,
            )
    return caught.value


async def test_a_planted_secret_stays_in_the_log_under_the_answers_reference(
    bus: Bus, caplog: pytest.LogCaptureFixture
) -> None:
    secret = f"hunter2-{uuid.uuid4().hex}"
    service = leaky(secret)
    with caplog.at_level(logging.DEBUG):
        async with running(bus, service):
            error = await call(bus, service, "crash")
    assert type(error) is ToolServiceError
    assert secret not in error.message
    assert error.message.startswith(f"internal error in tool service {service.id!r} (ref ")
    match = REFERENCE.search(error.message)
    assert match is not None
    telling = [r for r in caplog.records if secret in r.getMessage()]
    assert len(telling) == 1
    (record,) = telling
    assert f"(ref {match.group(1)})" in record.getMessage()
    assert "Traceback" in record.getMessage()  # the full story, for the operator
    assert record.levelno == logging.ERROR


async def test_each_failure_gets_its_own_reference(bus: Bus) -> None:
    service = leaky("s3cret-value")
    async with running(bus, service):
        first, second = await call(bus, service, "crash"), await call(bus, service, "crash")
    assert REFERENCE.findall(first.message) != REFERENCE.findall(second.message)


async def test_deliberate_errors_answer_with_their_message(bus: Bus) -> None:
    service = leaky("unused")
    async with running(bus, service):
        not_found = await call(bus, service, "not-found")
        custom = await call(bus, service, "custom")
    assert (type(not_found), not_found.message) == (NotFound, "no customer 42")
    assert (custom.error_type, custom.message) == ("rate-limited", "slow down")


async def test_a_service_may_expose_raw_messages_for_development(bus: Bus) -> None:
    service = leaky("dev-password")
    async with running(bus, service, expose_errors=True):
        error = await call(bus, service, "crash")
    assert error.message == "ValueError: cannot connect to postgres://app:dev-password@db/app"
