"""after-execution: the tool's setting, a service's per-response override, what sessions report."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import ToolResult, ToolService
from toolbus.domain.calls import wire
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import ConfigError
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, registry_for, tapped, tool

pytestmark = pytest.mark.anyio


async def _stream(*parts: Any) -> AsyncIterator[Any]:
    for part in parts:
        yield part


class Answers(ToolService):
    """Answers as ``arguments["how"]`` says, with or without an after-execution override."""

    id = "answer-service"

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        how = arguments.get("how", "plain")
        if how == "terminate":
            return ToolResult("the final answer", after_execution="terminate")
        if how == "suspend":
            return ToolResult("go on", after_execution="suspend")
        if how == "structured":
            return ToolResult({"answer": 42})  # no override
        if how == "stream-terminate":
            return _stream("the final ", ToolResult("answer", after_execution="terminate"))
        if how == "stream":
            return _stream("the ", "answer")
        return "plain"


def registry() -> Any:
    return registry_for(
        [Answers()],
        {
            "ask": tool("ask", "answer-service", ["how"]),
            "finish": tool("finish", "answer-service", ["how"], after_execution="terminate"),
            "carry-on": tool("carry-on", "answer-service", ["how"], after_execution="suspend"),
        },
    )


@pytest.mark.parametrize(
    ("tool_name", "how", "expected"),
    [
        ("ask", "plain", "suspend"),  # the default
        ("carry-on", "plain", "suspend"),
        ("finish", "plain", "terminate"),
        ("ask", "terminate", "terminate"),  # the service overrides the tool
        ("finish", "suspend", "suspend"),
        ("finish", "structured", "terminate"),  # ToolResult without override
        ("ask", "stream-terminate", "terminate"),
        ("finish", "stream", "terminate"),
    ],
)
async def test_a_session_reports_the_effective_after_execution(
    toolbus: ToolTestKit, tool_name: str, how: str, expected: str
) -> None:
    await toolbus.serve(Answers())
    audit = ListAuditSink()
    async with AgentSession(
        toolbus.tools(registry()), user="alice", audit=audit, metrics=ToolbusMetrics.disabled()
    ) as agent:
        outcome = await agent.call(tool_name, {"how": how}, tool_call_id="c1")
    assert outcome.ok, outcome.observation
    assert outcome.after_execution == expected
    assert audit.records[0].calls[0].after_execution == expected


async def test_the_override_travels_as_a_property_of_the_last_response(
    toolbus: ToolTestKit,
) -> None:
    service = Answers()
    await toolbus.serve(service)
    tools = toolbus.tools(registry())
    async with tapped(toolbus.bus, service.response_queue) as tap:
        invocation = await tools.invoke("ask", {"how": "stream-terminate"})
        plain = await tools.invoke("ask", {"how": "plain"})
    assert (invocation.observation, invocation.after_execution) == ("the final answer", "terminate")
    assert plain.after_execution == "suspend"
    flagged = [m.properties.get(wire.PROP_AFTER_EXECUTION) for m in tap.messages]
    # Two chunks, the end of the stream (flagged), then the plain answer (not flagged).
    assert flagged == [None, None, "terminate", None]


async def test_an_unknown_after_execution_from_a_foreign_service_is_ignored(
    toolbus: ToolTestKit, caplog: pytest.LogCaptureFixture
) -> None:
    # A service that is not toolbus may set the property to anything.
    foreign = Recorder("foreign-service")
    reg = registry_for(
        [foreign], {"foreign": tool("foreign", "foreign-service", after_execution="terminate")}
    )
    requests = await toolbus.bus.subscribe(foreign.request_queue)
    tools = toolbus.tools(reg)

    async def answer() -> None:
        async for delivery in requests:
            await toolbus.bus.publish(
                foreign.response_queue,
                wire.encode_response("done"),
                {
                    wire.PROP_ID: delivery.properties[wire.PROP_ID],
                    wire.PROP_AFTER_EXECUTION: "explode",
                },
            )
            return

    with caplog.at_level(logging.WARNING):
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(answer)
            invocation = await tools.invoke("foreign")
    await requests.close()
    assert invocation.after_execution == "terminate"
    assert "'explode'" in caplog.text and "foreign-service" in caplog.text


def test_tool_result_rejects_other_values() -> None:
    with pytest.raises(ValueError, match="after_execution must be one of"):
        ToolResult("x", after_execution="stop")


@pytest.mark.parametrize("value", ["stop", "", "Terminate", 1, None, ["terminate"]])
def test_any_other_descriptor_value_is_a_config_error(value: Any) -> None:
    snapshot = {
        "tool-service": {"answer-service": Answers().descriptor()},
        "tool": {"ask": {**tool("ask", "answer-service"), "after-execution": value}},
    }
    with pytest.raises(ConfigError) as caught:
        load_registry(snapshot)
    assert "tool 'ask' field 'after-execution'" in str(caught.value)
