"""Each error type round-trips: raised in a service, raised again by the caller's client."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.calls import wire
from toolbus.domain.errors import (
    ERROR_TYPES,
    AccessDenied,
    BadRequest,
    BusClosed,
    DeadlineExceeded,
    InternalError,
    NotFound,
    ToolCallError,
    ToolServiceError,
    Unauthorized,
    Unavailable,
    error_for,
)
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, registry_for, tapped, tool

pytestmark = pytest.mark.anyio

TAXONOMY = [
    (ToolServiceError, "tool-service-error"),
    (BadRequest, "bad-request"),
    (NotFound, "not-found"),
    (AccessDenied, "access-denied"),
    (Unauthorized, "unauthorized"),
    (DeadlineExceeded, "deadline-exceeded"),
    (Unavailable, "unavailable"),
    (InternalError, "internal"),
]


def raising(error: BaseException) -> Recorder:
    async def fail(arguments: dict[str, Any]) -> str:
        raise error

    return Recorder("failing-service", answer=fail)


def test_the_taxonomy_is_complete() -> None:
    assert {cls: cls.error_type for cls in ERROR_TYPES.values()} == dict(TAXONOMY)


@pytest.mark.parametrize(("cls", "error_type"), TAXONOMY)
async def test_each_error_type_round_trips_to_its_exception(
    toolbus: ToolTestKit, cls: type[ToolCallError], error_type: str
) -> None:
    service = raising(cls(f"it went wrong: {error_type}"))
    await toolbus.serve(service)
    async with tapped(toolbus.bus, service.response_queue) as tap:
        with pytest.raises(ToolCallError) as caught:
            await toolbus.call(service)
    assert type(caught.value) is cls
    assert caught.value.error_type == error_type
    assert caught.value.message == f"it went wrong: {error_type}"
    (response,) = tap.messages
    assert json.loads(response.body) == {
        "error": {"type": error_type, "message": f"it went wrong: {error_type}"},
        "response": "",
        "end_of_stream": True,
    }


@pytest.mark.parametrize(("cls", "error_type"), TAXONOMY)
async def test_a_session_turns_each_error_into_an_observation(
    toolbus: ToolTestKit, cls: type[ToolCallError], error_type: str
) -> None:
    service = raising(cls("it went wrong"))
    registry = registry_for([service], {"fail": tool("fail", "failing-service", state="next")})
    await toolbus.serve(service)
    audit = ListAuditSink()
    async with AgentSession(
        toolbus.tools(registry), user="u", audit=audit, metrics=ToolbusMetrics.disabled()
    ) as agent:
        outcome = await agent.call("fail", {}, tool_call_id="c1")
    assert (outcome.status, outcome.error_type) == ("error", error_type)
    assert outcome.observation == f"Error: tool 'fail' failed ({error_type}): it went wrong"
    assert outcome.state == "undefined"  # a failed call never moves the state
    assert audit.records[0].calls[0].error_type == error_type


async def test_any_other_exception_is_a_tool_service_error(toolbus: ToolTestKit) -> None:
    await toolbus.serve(service := raising(KeyError("customer")))
    with pytest.raises(ToolServiceError) as caught:
        await toolbus.call(service)
    assert type(caught.value) is ToolServiceError
    # The exception's text is for the service's log, not for the caller.
    assert caught.value.message.startswith("internal error in tool service 'failing-service' (ref ")
    assert "customer" not in caught.value.message


async def test_a_custom_error_type_keeps_its_name(toolbus: ToolTestKit) -> None:
    await toolbus.serve(service := raising(ToolCallError("slow down", error_type="rate-limited")))
    with pytest.raises(ToolServiceError) as caught:
        await toolbus.call(service)
    assert (caught.value.error_type, caught.value.message) == ("rate-limited", "slow down")


@pytest.mark.parametrize(("cls", "error_type"), TAXONOMY)
def test_error_for_maps_every_type(cls: type[ToolCallError], error_type: str) -> None:
    error = error_for(error_type, "m")
    assert type(error) is cls and error.message == "m"


async def test_an_error_after_some_chunks_is_raised_after_them(toolbus: ToolTestKit) -> None:
    async def answer(arguments: dict[str, Any]) -> Any:
        async def chunks() -> Any:
            yield "partial "
            raise Unavailable("backend went away")

        return chunks()

    service = Recorder("streaming-service", answer=answer)
    await toolbus.serve(service)
    seen: list[str] = []
    with pytest.raises(Unavailable, match="backend went away"):
        async for chunk in toolbus.client.stream(
            request_queue=service.request_queue, response_queue=service.response_queue
        ):
            seen.append(chunk)
    assert seen == ["partial "]


async def test_a_transport_failure_is_an_exception_even_in_a_session(
    toolbus: ToolTestKit,
) -> None:
    # Observation vs exception: a tool failure is for the model; a dead bus is not.
    service = Recorder("plain-service")
    registry = registry_for([service], {"plain": tool("plain", "plain-service")})
    await toolbus.serve(service)
    audit = ListAuditSink()
    agent = AgentSession(
        toolbus.tools(registry), user="u", audit=audit, metrics=ToolbusMetrics.disabled()
    )
    await toolbus.call(service)  # the response subscription exists
    await toolbus.bus.close()
    with pytest.raises(BusClosed):
        await agent.call("plain", {}, tool_call_id="c1")
    await agent.close()
    (call,) = audit.records[0].calls
    assert (call.status, call.error_type) == ("failed", "BusClosed")


def test_wire_error_types_are_the_exception_types() -> None:
    assert ToolServiceError.error_type == wire.GENERIC_ERROR
