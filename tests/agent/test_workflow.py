"""The tool-group spec's workflow, driven by a model through the real OpenAI and Anthropic SDKs."""

from __future__ import annotations

import pytest

from tests.agent.conftest import MakeAgent
from tests.agent.support import PROVIDERS, call
from tests.session.support import SECRET_COLLECTION, SERVICES
from tests.support.model_server import ModelServer
from toolbus.application.agent.loop import AgentLimits
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

# Worked out by hand from the rules for WORKFLOW_GROUPS (read-only, knowledge, compute, admin):
INITIAL_TOOLS = ["knowledge-query", "text-completion"]
ANALYSIS_TOOLS = ["graph-update", "text-completion", "complex-analysis", "reset-workflow"]
RESULTS_TOOLS = ["text-completion", "reset-workflow"]

WORKFLOW_SCRIPT = [
    {"text": "Let me look that up.", "calls": [call("knowledge-query", question="Company X?")]},
    {"calls": [call("complex-analysis", dataset="customers")]},
    {"text": "Analysis done; resetting.", "calls": [call("reset-workflow")]},
    {"text": "Company X is connected to Acme and Initech; the data has 3 clusters."},
]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "whole"])
async def test_the_model_walks_the_workflow_and_sees_each_states_tools(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    make_agent: MakeAgent,
    provider: str,
    streaming: bool,
) -> None:
    await toolbus.serve(*SERVICES)
    # Thoughts here are shorter than the hold, the answer longer: it streams.
    agent = await make_agent(
        provider,
        llm_options={"stream": str(streaming).lower()},
        limits=AgentLimits(answer_hold=30),
    )
    script = model_server.play(WORKFLOW_SCRIPT)

    run = await agent.ask("What is Company X connected to?", streaming=streaming)

    assert run.result.ok, run.events[-1]
    assert run.result.answer == WORKFLOW_SCRIPT[-1]["text"]
    # Re-exported every iteration: each transition changed what the model saw next.
    assert script.offered() == [INITIAL_TOOLS, ANALYSIS_TOOLS, RESULTS_TOOLS, INITIAL_TOOLS]
    assert run.kinds() == [
        "thought",
        "action",
        "observation",
        "action",
        "observation",
        "thought",
        "action",
        "observation",
        "answer",
    ]
    assert [e.state for e in run.of("observation")] == ["analysis", "results", "undefined"]
    observations = run.of("observation")
    assert observations[0].content.startswith("[alice] Company X is connected to Acme")
    assert all(e.status == "ok" for e in observations)
    # The answer arrives whole on the final event, or in chunks that add up to it.
    answer = "".join(e.content for e in run.of("answer"))
    assert answer == run.result.answer
    final = run.events[-1]
    assert final.end_of_stream and final.end_of_dialog and final.chunk_type == "answer"
    assert final.state == run.result.state == "undefined"
    assert final.iterations == 4
    assert final.usage is not None and final.usage.output_tokens > 0
    if streaming:
        assert len(run.of("answer")) > 1
        # Each message's last chunk says so; no empty closing chunks.
        assert [e.end_of_message for e in run.of("answer")][-1]
        assert all(e.content for e in run.events if e.chunk_type in ("thought", "answer"))
    record = agent.record(run)
    assert [(t.from_state, t.to_state) for t in record.state_transitions] == [
        ("undefined", "analysis"),
        ("analysis", "results"),
        ("results", "undefined"),
    ]
    assert record.agent is not None
    assert record.agent.model == agent.llm.model
    assert record.agent.iterations == 4
    assert record.agent.input_tokens == final.usage.input_tokens > 0
    assert record.agent.output_tokens == final.usage.output_tokens
    # Configuration values (secrets among them) never reach the tool lists the model sees.
    assert SECRET_COLLECTION not in str([body["tools"] for body in model_server.bodies])


async def test_the_final_state_lets_the_next_request_continue_the_workflow(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent()
    first = model_server.play(
        [{"calls": [call("knowledge-query", question="Company X?")]}, {"text": "Found it."}]
    )
    run = await agent.ask("Research Company X")
    assert run.result.state == "analysis"
    assert first.offered() == [INITIAL_TOOLS, ANALYSIS_TOOLS]

    second = model_server.play(
        [{"calls": [call("complex-analysis", dataset="customers")]}, {"text": "Analysed."}]
    )
    follow_up = await agent.ask("Continue the analysis", state=run.result.state)

    assert follow_up.result.state == "results"
    assert second.offered() == [ANALYSIS_TOOLS, RESULTS_TOOLS]


async def test_history_steps_reach_the_model_as_calls_and_observations(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    agent = await make_agent()
    model_server.play([{"text": "As before: Acme."}])
    history = [
        {
            "thought": "Look it up",
            "action": "knowledge-query",
            "arguments": {"question": "Company X?"},
            "observation": "Company X is connected to Acme",
        }
    ]

    run = await agent.ask("And again?", history=history)

    assert run.result.answer == "As before: Acme."
    messages = model_server.bodies[0]["messages"]
    assert messages[0]["role"] == "assistant"
    assert messages[0]["tool_calls"][0]["function"] == {
        "name": "knowledge-query",
        "arguments": '{"question": "Company X?"}',
    }
    assert messages[1] == {
        "role": "tool",
        "tool_call_id": messages[0]["tool_calls"][0]["id"],
        "content": "Company X is connected to Acme",
    }
    assert messages[2] == {"role": "user", "content": "And again?"}
