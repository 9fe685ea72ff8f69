"""The agent loop's spans, by the GenAI conventions: invoke_agent, chat, execute_tool."""

from __future__ import annotations

from typing import Any

import pytest

from tests.agent.conftest import MakeAgent
from tests.agent.support import PROVIDERS, call
from tests.session.support import SERVICES
from tests.support.model_server import ModelServer
from toolbus.application.agent.loop import AgentLimits
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_request_is_an_invoke_agent_span_over_its_model_turns_and_tool_calls(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    make_agent: MakeAgent,
    spans: Any,
    provider: str,
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent(provider)
    model_server.play(
        [{"calls": [call("knowledge-query", question="who runs X?")]}, {"text": "Bob does."}]
    )

    run = await agent.ask("Who runs X?")

    assert run.result.answer == "Bob does."
    finished = spans.get_finished_spans()
    [request] = [s for s in finished if s.name == "invoke_agent toolbus"]
    chats = [s for s in finished if s.name == f"chat {agent.llm.model}"]
    [tool] = [s for s in finished if s.name == "execute_tool knowledge-query"]
    assert request.kind.name == "INTERNAL"
    assert len(chats) == 2
    for child in (*chats, tool):
        assert child.parent.span_id == request.context.span_id
        assert child.context.trace_id == request.context.trace_id
    assert request.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert request.attributes["gen_ai.provider.name"] == provider
    assert request.attributes["gen_ai.request.model"] == agent.llm.model
    assert request.attributes["gen_ai.conversation.id"] == run.result.request_id
    assert request.attributes["gen_ai.usage.input_tokens"] == run.result.usage.input_tokens
    assert request.attributes["gen_ai.usage.output_tokens"] == run.result.usage.output_tokens
    first = min(chats, key=lambda s: s.start_time)
    assert first.kind.name == "CLIENT"
    assert first.attributes["gen_ai.operation.name"] == "chat"
    assert first.attributes["gen_ai.usage.input_tokens"] > 0
    assert list(first.attributes["gen_ai.response.finish_reasons"])  # the provider's word
    assert tool.attributes["gen_ai.tool.call.id"] == run.of("action")[0].tool_call_id
    # No question, argument or answer in any span.
    text = repr([dict(s.attributes) for s in finished])
    assert "who runs X" not in text and "Bob does" not in text


async def test_a_request_that_stops_marks_its_span_with_the_error_type(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent, spans: Any
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent(limits=AgentLimits(max_iterations=1, time_limit=30))
    model_server.play([{"calls": [call("knowledge-query", question="again?")]}])

    run = await agent.ask("Loop")

    assert run.result.error is not None
    [request] = [s for s in spans.get_finished_spans() if s.name == "invoke_agent toolbus"]
    assert request.attributes["error.type"] == run.result.error.type
    assert request.status.status_code.name == "ERROR"
