"""A tool's own word on what its call cost: the ``cost`` property of its last response.

The body stays TrustGraph's bytes (a TrustGraph peer reads only ``id`` of the
properties); a caller reads the cost as a number, and ignores what is not one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from toolbus.application.calls.service import ToolResult, ToolService
from toolbus.domain.calls import wire
from toolbus.testing.kit import ToolTestKit

from .support import registry_for, tapped, tool

pytestmark = pytest.mark.anyio


async def _stream(*parts: Any) -> AsyncIterator[Any]:
    for part in parts:
        yield part


class Priced(ToolService):
    """Answers ``arguments["how"]``: with a cost, without, or streamed with one."""

    id = "priced-service"

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        how = arguments.get("how")
        if how == "priced":
            return ToolResult("42", cost=0.0125)
        if how == "stream":
            return _stream("4", ToolResult("2", cost=0.5))
        return "42"


async def test_the_cost_rides_as_a_property_and_the_body_is_unchanged(
    toolbus: ToolTestKit,
) -> None:
    service = Priced()
    await toolbus.serve(service)
    tools = toolbus.tools(registry_for([service], {"ask": tool("ask", service.id, ["how"])}))
    async with tapped(toolbus.bus, service.response_queue) as tap:
        priced = await tools.invoke("ask", {"how": "priced"})
        plain = await tools.invoke("ask", {"how": "plain"})

    assert (priced.cost, plain.cost) == (0.0125, None)
    with_cost, without = tap.on(service.response_queue)
    assert with_cost.body == without.body == wire.encode_response("42", end_of_stream=True)
    assert with_cost.properties[wire.PROP_COST] == "0.0125"
    assert wire.PROP_COST not in without.properties


async def test_a_streamed_answers_cost_comes_on_its_last_response(toolbus: ToolTestKit) -> None:
    service = Priced()
    await toolbus.serve(service)
    tools = toolbus.tools(registry_for([service], {"ask": tool("ask", service.id, ["how"])}))
    async with tapped(toolbus.bus, service.response_queue) as tap:
        answer = await tools.invoke("ask", {"how": "stream"})

    assert (answer.observation, answer.cost) == ("42", 0.5)
    *chunks, last = tap.on(service.response_queue)
    assert all(wire.PROP_COST not in chunk.properties for chunk in chunks)
    assert last.properties[wire.PROP_COST] == "0.5"


@pytest.mark.parametrize(
    ("said", "read"),
    [("0.25", 0.25), ("3", 3.0), ("-1", None), ("inf", None), ("nan", None), ("lots", None)],
)
def test_a_cost_is_read_only_when_it_is_a_number_zero_or_more(
    said: str, read: float | None
) -> None:
    assert wire.read_cost(said) == read


@pytest.mark.parametrize("cost", [-0.5, float("inf"), float("nan"), "0.1", True])
def test_a_tool_result_refuses_a_cost_that_is_not_one(cost: Any) -> None:
    with pytest.raises(ValueError, match="cost must be a finite number"):
        ToolResult("x", cost=cost)
