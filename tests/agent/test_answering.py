"""An agent run answers the tools that ask it: a completion from its model, a form from its
user through the run's events, its roots; on the bus, the asker answers the form."""

from __future__ import annotations

from collections.abc import Mapping

import anyio
import pytest

from tests.agent.conftest import MakeAgent
from tests.agent.support import call, extra_tool, snapshot_with
from tests.session.support import SERVICES, WORKFLOW_GROUPS
from tests.support.model_server import ModelServer
from toolbus import (
    Elicitation,
    ElicitationAnswer,
    RootsRequest,
    Sampling,
    ask,
    can_ask,
    tool_service,
)
from toolbus.application.agent.client import AgentClient
from toolbus.application.agent.service import AgentService
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.calls.input_requests import InputAnswer, InputAsk, Root
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

FORM = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


@tool_service("poet")
async def poet(topic: str) -> str:
    verse = await ask(Sampling([f"Write about {topic}"], system_prompt="You are a poet"))
    if not can_ask("elicitation"):
        return f"{verse.text} (for nobody: I could not ask)"
    reader = await ask(Elicitation("Who is it for?", FORM))
    where = await ask(RootsRequest()) if can_ask("roots") else None
    folder = where.roots[0].uri if where and where.roots else "nowhere"
    return f"{verse.text} for {reader.content.get('name', reader.action)} in {folder}"


def snapshot() -> dict[str, object]:
    tool = extra_tool(
        "poet",
        poet,
        arguments=[{"name": "topic", "type": "string", "description": "what about"}],
    )
    return snapshot_with(poet, poet=tool)


TURNS = [
    {"text": "Rain falls softly.", "calls": [call("poet", topic="rain")]},
    {"text": "Done."},
]


async def test_a_run_answers_with_its_model_its_user_and_its_roots(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES, poet)
    script = model_server.play(TURNS)
    agent = await make_agent(snapshot=snapshot(), roots=[Root("file:///work", "work")])
    events: list[AgentEvent] = []
    asked: list[InputAsk] = []

    async def emit(event: AgentEvent) -> None:
        events.append(event)

    async def ask_user(question: InputAsk) -> Mapping[str, InputAnswer]:
        asked.append(question)
        return {key: ElicitationAnswer("accept", {"name": "Ann"}) for key in question.requests}

    request = AgentRequest(question="A poem, please", user="alice", group=WORKFLOW_GROUPS)
    result = await agent.loop.run(request, emit=emit, ask_user=ask_user)

    [observation] = [e for e in events if e.chunk_type == "observation"]
    assert observation.content == "Rain falls softly. for Ann in file:///work"
    [shown] = [e for e in events if e.chunk_type == "input"]
    assert shown.input_requests is not None
    assert [r["params"]["message"] for r in shown.input_requests.values()] == ["Who is it for?"]
    # The event went out before the user was asked, and the user saw only the form.
    assert events.index(shown) < events.index(observation)
    assert [list(q.requests) for q in asked] == [["elicitation-2"]]
    # The completion was the model's: a chat of its own, with no tools offered.
    sampled = [tools for key, tools in script.requests if key == "Write about rain"]
    assert sampled == [[]]
    assert result.ok and result.usage.output_tokens > 0


async def test_a_run_that_cannot_ask_its_user_says_so_to_the_tool(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES, poet)
    model_server.play(TURNS)
    agent = await make_agent(snapshot=snapshot())
    run = await agent.ask("A poem, please")

    [observation] = run.of("observation")
    assert observation.content == "Rain falls softly. (for nobody: I could not ask)"
    assert run.of("input") == []


@pytest.mark.parametrize("answering", [True, False])
async def test_on_the_bus_the_asker_answers_the_form(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent, answering: bool
) -> None:
    await toolbus.serve(*SERVICES, poet)
    model_server.play(TURNS)
    agent = await make_agent(snapshot=snapshot())
    service = AgentService(toolbus.bus, agent.loop)

    async def person(question: InputAsk) -> Mapping[str, InputAnswer]:
        return {key: ElicitationAnswer("accept", {"name": "Bo"}) for key in question.requests}

    request = AgentRequest(question="A poem, please", user="alice", group=WORKFLOW_GROUPS)
    async with anyio.create_task_group() as group:
        await group.start(service.serve)
        async with AgentClient(toolbus.bus) as agents:
            with anyio.fail_after(20):
                events = [
                    event
                    async for event in agents.ask(
                        request, timeout=10, answer=person if answering else None
                    )
                ]
        group.cancel_scope.cancel()

    [observation] = [e for e in events if e.chunk_type == "observation"]
    if answering:
        assert [e.chunk_type for e in events].count("input") == 1
        assert observation.content == "Rain falls softly. for Bo in nowhere"
    else:  # no answers can come: the tool hears so at once, and the run goes on
        assert observation.content == "Rain falls softly. (for nobody: I could not ask)"
