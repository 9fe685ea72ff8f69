"""Deadlines: the caller's timeout travels as an absolute time; late work never starts."""

from __future__ import annotations

import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.calls import wire
from toolbus.domain.errors import DeadlineExceeded
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, registry_for, tapped, tool

pytestmark = pytest.mark.anyio

NOW = 1_800_000_000.0


class Clock:
    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_the_deadline_property_is_the_callers_clock_plus_the_timeout(
    toolbus: ToolTestKit,
) -> None:
    service = Recorder("clocked-service")
    await toolbus.serve(service, clock=Clock(NOW))
    async with (
        ToolServiceClient(toolbus.bus, clock=Clock(NOW)) as client,
        tapped(toolbus.bus, service.request_queue) as tap,
    ):
        await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            timeout=2.5,
        )
    assert float(tap.messages[0].properties[wire.PROP_DEADLINE]) == NOW + 2.5


async def test_an_expired_deadline_never_reaches_invoke(toolbus: ToolTestKit) -> None:
    service = Recorder("late-service")
    # The service's clock is a minute past the caller's deadline.
    await toolbus.serve(service, clock=Clock(NOW + 60))
    async with ToolServiceClient(toolbus.bus, clock=Clock(NOW)) as client:
        with pytest.raises(DeadlineExceeded) as caught:
            await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                timeout=5,
            )
        with pytest.raises(DeadlineExceeded):
            async for _ in client.stream(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                timeout=5,
            ):
                pass
    assert "late-service" in str(caught.value)
    assert caught.value.error_type == "deadline-exceeded"
    assert service.calls == []


async def test_the_deadline_instant_itself_is_too_late(toolbus: ToolTestKit) -> None:
    service = Recorder("late-service")
    await toolbus.serve(service, clock=Clock(NOW + 5))
    async with ToolServiceClient(toolbus.bus, clock=Clock(NOW)) as client:
        with pytest.raises(DeadlineExceeded):
            await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                timeout=5,
            )
    assert service.calls == []


async def test_work_within_the_deadline_runs(toolbus: ToolTestKit) -> None:
    service = Recorder("timely-service")
    await toolbus.serve(service, clock=Clock(NOW + 4.9))
    async with ToolServiceClient(toolbus.bus, clock=Clock(NOW)) as client:
        answer = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            timeout=5,
        )
    assert answer == "ok"
    assert len(service.calls) == 1


@pytest.mark.parametrize("deadline", ["soon", "", "nan-ish"])
async def test_an_unreadable_deadline_is_ignored(toolbus: ToolTestKit, deadline: str) -> None:
    service = Recorder("lenient-service")
    await toolbus.serve(service)
    answers = await toolbus.bus.subscribe(service.response_queue)
    await toolbus.bus.publish(
        service.request_queue,
        wire.encode_request("u"),
        {wire.PROP_ID: "raw-1", wire.PROP_DEADLINE: deadline},
    )
    async for delivery in answers:
        assert delivery.properties[wire.PROP_ID] == "raw-1"
        assert wire.decode_response(delivery.body).error_type is None
        break
    await answers.close()
    assert len(service.calls) == 1


async def test_a_session_sees_an_expired_deadline_as_an_error_observation(
    toolbus: ToolTestKit,
) -> None:
    service = Recorder("late-service")
    registry = registry_for([service], {"late": tool("late", "late-service")})
    await toolbus.serve(service, clock=Clock(NOW + 60))
    audit = ListAuditSink()
    async with (
        ToolServiceClient(toolbus.bus, clock=Clock(NOW)) as client,
        AgentSession(
            client,
            registry,
            user="alice",
            audit=audit,
            metrics=ToolbusMetrics.disabled(),
            timeout=5,
        ) as agent,
    ):
        outcome = await agent.call("late", {}, tool_call_id="c1")
    assert (outcome.status, outcome.error_type) == ("error", "deadline-exceeded")
    assert outcome.state == "undefined"
    assert outcome.after_execution is None
    assert audit.records[0].calls[0].error_type == "deadline-exceeded"
    assert service.calls == []
