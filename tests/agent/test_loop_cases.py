"""The agent loop: refusals, tool errors, parallel calls, hooks, limits, failures, cancellation."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

from tests.agent.conftest import MakeAgent
from tests.agent.support import PROVIDERS, call, extra_tool, snapshot_with
from tests.session.support import BROKEN_DATASET, SERVICES, workflow_snapshot
from tests.support.model_server import ModelServer
from toolbus.application.agent.code_hooks import Deny
from toolbus.application.agent.loop import AgentLimits
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import FunctionToolService, tool_service
from toolbus.hooks import CodeHooks
from toolbus.plugins import hookimpl
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio


async def test_a_tool_the_model_invents_is_refused_and_the_model_is_told(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent()
    model_server.play(
        [{"calls": [call("delete-everything", scope="all")]}, {"text": "I cannot do that."}]
    )

    run = await agent.ask("Wipe the graph")

    [observation] = run.of("observation")
    assert observation.status == "refused"
    assert "There is no tool named 'delete-everything'" in observation.content
    assert "No call was made" in observation.content
    # The refusal went back to the model as the answer to its call.
    second = model_server.bodies[1]["messages"]
    assert second[-1]["role"] == "tool"
    assert second[-1]["content"] == observation.content
    assert run.result.answer == "I cannot do that."
    [record] = agent.record(run).calls
    assert (record.status, record.refusal) == ("refused", "unknown")


async def test_a_tool_error_goes_back_to_the_model_which_recovers(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent()
    model_server.play(
        [
            {"calls": [call("complex-analysis", dataset=BROKEN_DATASET)]},
            {
                "text": "That data set is broken; trying another.",
                "calls": [call("complex-analysis", dataset="customers")],
            },
            {"text": "3 clusters."},
        ]
    )

    run = await agent.ask("Analyse", state="analysis")

    failed, recovered = run.of("observation")
    assert failed.status == "error"
    assert "corrupt" in failed.content
    assert failed.state == "analysis"  # a failed call never moves the state
    assert recovered.status == "ok"
    assert recovered.state == run.result.state == "results"
    assert run.result.answer == "3 clusters."


async def test_calls_of_one_turn_run_concurrently(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    # Each service answers only once the other has started: run one after the
    # other, the first would wait forever (and the test time out).
    started = {"north": anyio.Event(), "south": anyio.Event()}

    def waiting_for(mine: str, other: str) -> FunctionToolService:
        @tool_service(f"{mine}-service")
        async def service(user: str) -> str:
            started[mine].set()
            await started[other].wait()
            return f"{mine} is clear"

        return service

    north, south = waiting_for("north", "south"), waiting_for("south", "north")
    await toolbus.serve(north, south)
    agent = await make_agent(
        snapshot=snapshot_with(
            north, south, north=extra_tool("north", north), south=extra_tool("south", south)
        )
    )
    model_server.play([{"calls": [call("north"), call("south")]}, {"text": "Both ways are clear."}])

    with anyio.fail_after(10):
        run = await agent.ask("Which way?")

    assert [e.tool for e in run.of("action")] == ["north", "south"]
    assert [e.content for e in run.of("observation")] == ["north is clear", "south is clear"]
    # Both observations answer their calls, in the order the model made them.
    tool_messages = [m for m in model_server.bodies[1]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in tool_messages] == ["north is clear", "south is clear"]
    assert run.result.answer == "Both ways are clear."


async def test_a_ttl_hook_runs_on_the_first_request_and_is_reused_by_the_next(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    fetched: list[str] = []

    @tool_service("memory-service")
    async def memory(user: str) -> str:
        fetched.append(user)
        return f"{user} likes hiking"

    await toolbus.serve(memory)
    snapshot = snapshot_with(memory, **{"get-memories": extra_tool("get_memories", memory)})
    snapshot["hooks"] = [
        {
            "kind": "tool_call",
            "event": "on_request_start",
            "tool_name": "get_memories",
            "refresh_condition": {"kind": "ttl", "ttl_minutes": 60},
        }
    ]
    agent = await make_agent(snapshot=snapshot)

    model_server.play([{"text": "Go hiking."}])
    first = await agent.ask(messages=[{"role": "user", "content": "Plan my weekend"}])
    # The model saw the hook's result before its first turn.
    chat = model_server.bodies[0]["messages"]
    assert [m["role"] for m in chat] == ["user", "assistant", "tool"]
    assert chat[2]["content"] == "alice likes hiking"
    assert fetched == ["alice"]

    # The caller keeps the chat (hook result included) and asks again within the TTL.
    model_server.play([{"text": "Hike again."}])
    kept = [*chat, {"role": "assistant", "content": first.result.answer}]
    second = await agent.ask(messages=[*kept, {"role": "user", "content": "And next weekend?"}])

    assert second.result.answer == "Hike again."
    assert fetched == ["alice"]  # not fetched again: the result is still fresh
    assert model_server.bodies[0]["messages"][: len(kept)] == kept


async def test_terminate_makes_the_observation_the_answer_and_suspend_goes_on(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    @tool_service("desk-service")
    async def desk(user: str) -> str:
        return "A person will call you back."

    await toolbus.serve(desk)
    agent = await make_agent(
        snapshot=snapshot_with(
            desk,
            escalate=extra_tool("escalate", desk, **{"after-execution": "terminate"}),
            note=extra_tool("note", desk, **{"after-execution": "suspend"}),
        )
    )

    model_server.play([{"calls": [call("escalate")]}, {"text": "never asked"}])
    run = await agent.ask("I want a human")
    assert run.result.answer == "A person will call you back."
    assert run.events[-1].chunk_type == "answer" and run.events[-1].last
    assert len(model_server.bodies) == 1  # the model was not asked again

    model_server.play([{"calls": [call("note")]}, {"text": "Noted, and here is more."}])
    run = await agent.ask("Take a note")
    assert run.result.answer == "Noted, and here is more."
    assert len(model_server.bodies) == 2


async def test_max_iterations_ends_the_request_with_an_error_event(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    await toolbus.serve(*SERVICES)
    agent = await make_agent(limits=AgentLimits(max_iterations=2))
    model_server.play([{"calls": [call("text-completion", prompt="more")]}])  # forever

    run = await agent.ask("Write forever")

    final = run.events[-1]
    assert final.chunk_type == "error" and final.last
    assert final.error is not None and final.error.type == "max-iterations"
    assert "2 iterations" in final.error.message
    assert run.result.error == final.error
    assert len(model_server.bodies) == 2
    # The last turn's calls were not made: the model could never have seen them.
    assert len(agent.record(run).calls) == 1
    assert final.iterations == 2


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_500_and_429_are_retried_with_backoff(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent, provider: str
) -> None:
    agent = await make_agent(provider, llm_options={"max_retries": 2})
    model_server.play(
        [
            {"failure": {"status": 500, "message": "boom", "retry_after_ms": 1}},
            {"failure": {"status": 429, "message": "slow down", "retry_after_ms": 1}},
            {"text": "Third time lucky."},
        ]
    )

    run = await agent.ask("Hello?")

    assert run.result.answer == "Third time lucky."
    assert len(model_server.bodies) == 3


@pytest.mark.parametrize("provider", PROVIDERS)
async def test_a_model_that_keeps_failing_ends_in_a_clear_error_event(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent, provider: str
) -> None:
    registry = CollectorRegistry()
    agent = await make_agent(
        provider, llm_options={"max_retries": 1}, metrics=ToolbusMetrics(registry)
    )
    model_server.play(
        [{"failure": {"status": 500, "message": "model is down", "retry_after_ms": 1}}]
    )

    run = await agent.ask("Hello?")

    final = run.events[-1]
    assert final.last and final.error is not None
    assert final.error.type == "model-error"
    assert "HTTP 500" in final.error.message and "model is down" in final.error.message
    assert len(model_server.bodies) == 2  # the first try and one retry
    assert agent.record(run).outcome == "completed"
    turn = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": provider,
        "gen_ai_request_model": agent.llm.model,
    }
    failed = {**turn, "error_type": "model-error"}
    duration = "gen_ai_client_operation_duration_seconds_count"
    assert registry.get_sample_value(duration, failed) == 1
    tokens = {**turn, "gen_ai_token_type": "input"}
    assert registry.get_sample_value("gen_ai_client_token_usage_count", tokens) is None


async def test_cancelling_a_request_mid_call_leaves_no_pending_calls(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    entered, release = anyio.Event(), anyio.Event()

    @tool_service("slow-service")
    async def slow(user: str) -> str:
        entered.set()
        await release.wait()  # set at the end, so that the service host stops at once
        return "too late"

    await toolbus.serve(slow)
    agent = await make_agent(snapshot=snapshot_with(slow, slow=extra_tool("slow", slow)))
    model_server.play([{"calls": [call("slow"), call("slow")]}])

    try:
        async with anyio.create_task_group() as group:
            group.start_soon(agent.ask, "Take your time")
            await entered.wait()
            assert toolbus.client.pending > 0
            group.cancel_scope.cancel()
    finally:
        release.set()

    assert toolbus.client.pending == 0
    [record] = agent.audit.records
    assert record.outcome == "cancelled"
    assert [c.status for c in record.calls] == ["cancelled", "cancelled"]


async def test_the_time_limit_cancels_calls_in_flight_and_says_so(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    release = anyio.Event()

    @tool_service("slow-service")
    async def slow(user: str) -> str:
        await release.wait()
        return "too late"

    await toolbus.serve(slow)
    agent = await make_agent(
        snapshot=snapshot_with(slow, slow=extra_tool("slow", slow)),
        limits=AgentLimits(time_limit=0.5),
    )
    model_server.play([{"calls": [call("slow")]}])

    try:
        run = await agent.ask("Take your time")
    finally:
        release.set()

    final = run.events[-1]
    assert final.error is not None and final.error.type == "deadline"
    assert "0.5 s" in final.error.message
    assert toolbus.client.pending == 0
    [call_record] = agent.record(run).calls
    assert call_record.status == "cancelled"


async def test_groups_beyond_the_users_permissions_are_refused_before_the_model_runs(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    agent = await make_agent(
        snapshot=workflow_snapshot(permissions={"users": {"alice": ["read-only"]}})
    )
    model_server.play([{"text": "never asked"}])

    run = await agent.ask("Everything please", group=["admin"])

    [event] = run.events
    assert event.error is not None and event.error.type == "access-denied"
    assert "admin" in event.error.message
    assert model_server.bodies == []
    assert agent.audit.records[0].outcome == "denied"


async def test_code_hooks_act_on_the_models_calls(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    class NoGraphWrites:
        @hookimpl
        def toolbus_on_pre_tool_use(self, tool: Any) -> Deny | None:
            return (
                Deny("Graph writes are switched off today.")
                if tool.name == "graph-update"
                else None
            )

    await toolbus.serve(*SERVICES)
    agent = await make_agent(code_hooks=CodeHooks([NoGraphWrites()]))
    model_server.play(
        [{"calls": [call("graph-update", entity="X", operation="delete")]}, {"text": "Understood."}]
    )

    run = await agent.ask("Delete X", state="analysis")

    [observation] = run.of("observation")
    assert observation.status == "refused"
    assert observation.content == "Graph writes are switched off today."
    assert run.result.answer == "Understood."


async def test_the_api_key_never_reaches_events_logs_or_the_audit_record(
    toolbus: ToolTestKit,
    model_server: ModelServer,
    make_agent: MakeAgent,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "sk-test-" + "9" * 24
    monkeypatch.setenv("SCRIPTED_MODEL_KEY", secret)
    agent = await make_agent(llm_options={"api_key_env": "SCRIPTED_MODEL_KEY", "max_retries": 0})
    model_server.play([{"failure": {"status": 401, "message": "bad key"}}])

    with caplog.at_level(logging.INFO):
        run = await agent.ask("Hello?")

    assert run.result.error is not None and "HTTP 401: bad key" in run.result.error.message
    assert secret not in caplog.text
    assert all(secret not in event.model_dump_json() for event in run.events)
    assert secret not in agent.record(run).to_json()


async def test_the_loop_counts_requests_iterations_and_tokens(
    toolbus: ToolTestKit, model_server: ModelServer, make_agent: MakeAgent
) -> None:
    registry = CollectorRegistry()
    await toolbus.serve(*SERVICES)
    agent = await make_agent(metrics=ToolbusMetrics(registry))
    model_server.play(
        [
            {"calls": [call("text-completion", prompt="a")], "input_tokens": 7, "output_tokens": 3},
            {"text": "Done.", "input_tokens": 11, "output_tokens": 2},
        ]
    )
    await agent.ask("Once")
    model_server.play(
        [{"calls": [call("text-completion", prompt="a")], "input_tokens": 1, "output_tokens": 4}]
    )
    agent.loop.limits = AgentLimits(max_iterations=1)
    await agent.ask("Twice")

    def sample(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert sample("toolbus_agent_requests_total", outcome="answer") == 1
    assert sample("toolbus_agent_requests_total", outcome="max-iterations") == 1
    assert sample("toolbus_agent_iterations_count") == 2
    assert sample("toolbus_agent_iterations_sum") == 3
    # The GenAI client metrics, per model turn.
    turn = {
        "gen_ai_operation_name": "chat",
        "gen_ai_provider_name": "openai",
        "gen_ai_request_model": agent.llm.model,
    }
    tokens = "gen_ai_client_token_usage"
    assert sample(f"{tokens}_sum", **turn, gen_ai_token_type="input") == 7 + 11 + 1
    assert sample(f"{tokens}_sum", **turn, gen_ai_token_type="output") == 3 + 2 + 4
    assert sample(f"{tokens}_count", **turn, gen_ai_token_type="input") == 3
    duration = "gen_ai_client_operation_duration_seconds"
    assert sample(f"{duration}_count", **turn, error_type="") == 3
    assert sample(f"{duration}_sum", **turn, error_type="") > 0
