"""Agents on the bus: requests in, event streams out, on the in-memory bus."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from tests.agent.conftest import MakeAgent
from tests.agent.support import AgentHarness, call, extra_tool, snapshot_with
from tests.session.support import SERVICES, WORKFLOW_GROUPS
from tests.support.model_server import ModelServer
from toolbus.application.agent.client import AgentClient
from toolbus.application.agent.service import AgentService
from toolbus.application.calls.service import tool_service
from toolbus.domain.agent.wire import (
    DEFAULT_REQUEST_QUEUE,
    DEFAULT_RESPONSE_QUEUE,
    AgentEvent,
    AgentRequest,
    decode_event,
)
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio


@pytest.fixture
async def served(
    toolbus: ToolTestKit, make_agent: MakeAgent
) -> AsyncIterator[tuple[AgentHarness, AgentService]]:
    await toolbus.serve(*SERVICES)
    agent = await make_agent()
    service = AgentService(toolbus.bus, agent.loop, concurrency=2)
    async with anyio.create_task_group() as group:
        await group.start(service.serve)
        yield agent, service
        group.cancel_scope.cancel()


async def test_a_request_on_the_bus_is_answered_with_a_stream_of_events(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    served: tuple[AgentHarness, AgentService],
) -> None:
    model_server.play(
        [{"calls": [call("knowledge-query", question="X?")]}, {"text": "Acme and Initech."}]
    )
    request = AgentRequest(question="Who is X?", user="alice", group=WORKFLOW_GROUPS)

    async with AgentClient(toolbus.bus) as agents:
        events = [event async for event in agents.ask(request, timeout=10)]
        assert agents.pending == 0

    assert [e.chunk_type for e in events] == ["action", "observation", "answer"]
    assert events[0].tool == "knowledge-query" and events[0].arguments == {"question": "X?"}
    assert events[1].content.startswith("[alice] Company X")
    final = events[-1]
    assert final.content == "Acme and Initech."
    assert final.end_of_stream and final.end_of_dialog
    assert final.state == "analysis"


async def test_events_on_the_wire_use_trustgraphs_field_names(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    served: tuple[AgentHarness, AgentService],
) -> None:
    model_server.play([{"text": "Hello."}])
    replies = await toolbus.bus.subscribe(DEFAULT_RESPONSE_QUEUE)
    request_id = str(uuid.uuid4())
    # A request as a TrustGraph client writes it.
    body = {"question": "Hi", "state": "", "group": None, "history": [], "user": "bob"}
    await toolbus.bus.publish(DEFAULT_REQUEST_QUEUE, json.dumps(body).encode(), {"id": request_id})

    with anyio.fail_after(10):
        delivery = await anext(aiter(replies))
    await replies.close()

    assert delivery.properties["id"] == request_id
    data = json.loads(delivery.body)
    assert data["chunk_type"] == "answer" and data["content"] == "Hello."
    assert data["end_of_message"] is data["end_of_dialog"] is data["end_of_stream"] is True
    assert decode_event(delivery.body).state == "undefined"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"{not json", "is not UTF-8 JSON"),
        (b"[1, 2]", "must be a JSON object, not list"),
        (b'{"question": ""}', "has no question"),
        (b'{"question": "x", "group": "admin"}', "group"),
    ],
)
async def test_a_bad_request_gets_one_error_event_and_the_service_goes_on(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    served: tuple[AgentHarness, AgentService],
    body: bytes,
    problem: str,
) -> None:
    replies = await toolbus.bus.subscribe(DEFAULT_RESPONSE_QUEUE)
    await toolbus.bus.publish(DEFAULT_REQUEST_QUEUE, body, {"id": "bad-1"})
    with anyio.fail_after(10):
        delivery = await anext(aiter(replies))
    await replies.close()
    event = decode_event(delivery.body)
    assert event.chunk_type == "error" and event.last
    assert event.error is not None and event.error.type == "bad-request"
    assert problem in event.error.message

    # The service is still there for the next request.
    model_server.play([{"text": "Still here."}])
    async with AgentClient(toolbus.bus) as agents:
        events = [e async for e in agents.ask(AgentRequest(question="Alive?"), timeout=10)]
    assert events[-1].content == "Still here."


async def test_a_caller_that_stops_reading_mid_stream_leaves_nothing_pending(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    served: tuple[AgentHarness, AgentService],
) -> None:
    model_server.play(
        [{"calls": [call("knowledge-query", question="X?")]}, {"text": "Acme and Initech."}]
    )
    request = AgentRequest(question="Who is X?", user="alice", group=WORKFLOW_GROUPS)
    async with AgentClient(toolbus.bus) as agents:
        stream = agents.ask(request, timeout=10)
        first = await stream.__anext__()
        assert first.chunk_type == "action"
        assert agents.pending == 1
        await stream.aclose()
        assert agents.pending == 0


async def test_stop_lets_requests_in_flight_finish(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    entered, release = anyio.Event(), anyio.Event()

    @tool_service("slow-service")
    async def slow(user: str) -> str:
        entered.set()
        await release.wait()
        return "done slowly"

    await toolbus.serve(slow)
    agent = await make_agent(snapshot=snapshot_with(slow, slow=extra_tool("slow", slow)))
    model_server.play([{"calls": [call("slow")]}, {"text": "Finished."}])
    service = AgentService(toolbus.bus, agent.loop, concurrency=2)
    events: list[AgentEvent] = []

    async with AgentClient(toolbus.bus) as agents, anyio.create_task_group() as group:
        await group.start(service.serve)

        async def ask() -> None:
            request = AgentRequest(question="Slow?", user="alice", group=["read-only"])
            events.extend([e async for e in agents.ask(request, timeout=10)])

        group.start_soon(ask)
        await entered.wait()
        service.stop()  # serve() now waits for the request in flight
        release.set()

    assert [e.chunk_type for e in events] == ["action", "observation", "answer"]
    assert events[-1].content == "Finished."
    assert service.answered == 1
