"""The tool-group spec's workflow, end to end over the in-memory bus with real services."""

from __future__ import annotations

import gc
import re
import weakref
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.calling import ToolStream
from toolbus.application.agent.session import AgentSession
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import BusClosed
from toolbus.memory.bus import connect
from toolbus.testing.kit import ToolTestKit

from .support import (
    BROKEN_DATASET,
    SERVICES,
    WORKFLOW_GROUPS,
    FakeClock,
    offered,
    open_session,
    workflow_registry,
    workflow_snapshot,
)

pytestmark = pytest.mark.anyio

# Worked out by hand from the rules for WORKFLOW_GROUPS (read-only, knowledge, compute, admin):
INITIAL_TOOLS = ["knowledge-query", "text-completion"]
ANALYSIS_TOOLS = ["graph-update", "text-completion", "complex-analysis", "reset-workflow"]
RESULTS_TOOLS = ["text-completion", "reset-workflow"]


async def test_the_spec_workflow_offers_exactly_what_the_rules_allow_at_every_step(
    toolbus: ToolTestKit,
) -> None:
    await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    clock = FakeClock()
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=audit,
        clock=clock,
        user="alice",
        groups=WORKFLOW_GROUPS,
        request_id="req-123",
    )
    async with session:
        assert session.state == "undefined"
        assert offered(session) == INITIAL_TOOLS
        assert session.availability.filtered_by_group == ()
        assert session.availability.filtered_by_state == (
            "graph-update",
            "complex-analysis",
            "reset-workflow",
        )

        clock.advance(1)
        outcome = await session.call(
            "knowledge-query", {"question": "What is connected to Company X?"}, "call-1"
        )
        assert outcome.ok, outcome.observation
        assert outcome.observation.startswith("[alice] Company X is connected to Acme")
        assert session.state == outcome.state == "analysis"
        assert offered(session) == ANALYSIS_TOOLS

        clock.advance(1)
        outcome = await session.call("complex-analysis", {"dataset": "customers"}, "call-2")
        assert outcome.ok, outcome.observation
        assert session.state == "results"
        assert offered(session) == RESULTS_TOOLS

        clock.advance(1)
        outcome = await session.call("reset-workflow", {}, "call-3")
        assert outcome.ok, outcome.observation
        assert outcome.observation == "[alice] workflow reset"
        assert session.state == "undefined"
        # Back to start: the initial tools are offered again, and the workflow can repeat.
        assert offered(session) == INITIAL_TOOLS
        assert (await session.call("knowledge-query", {"question": "again"})).state == "analysis"

    steps = [(t.tool, t.from_state, t.to_state) for t in session.transitions]
    assert steps == [
        ("knowledge-query", "undefined", "analysis"),
        ("complex-analysis", "analysis", "results"),
        ("reset-workflow", "results", "undefined"),
        ("knowledge-query", "undefined", "analysis"),
    ]
    [record] = audit.records
    assert record.request_id == "req-123"
    assert record.to_dict()["state_transitions"][0] == {
        "tool": "knowledge-query",
        "from": "undefined",
        "to": "analysis",
        "timestamp": "2024-01-01T10:00:01Z",
    }


@pytest.mark.parametrize(
    ("groups", "state", "expected"),
    [
        # Section 5.2 of the spec, request by request.
        (["read-only", "knowledge"], "undefined", ["knowledge-query", "text-completion"]),
        # The spec lists reset-workflow here too, but by its own rules it needs the
        # "admin" group, which this request does not ask for.
        (["advanced", "compute", "write"], "analysis", ["graph-update", "complex-analysis"]),
        (["admin"], "results", ["reset-workflow"]),
        (["*"], "analysis", ANALYSIS_TOOLS),
        (["*"], "research", ["knowledge-query", "text-completion"]),
        (None, None, []),  # nothing is in the "default" group
        ([], None, []),
    ],
)
async def test_each_request_of_the_spec_gets_its_filtered_tools(
    toolbus: ToolTestKit, groups: list[str] | None, state: str | None, expected: list[str]
) -> None:
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        user="alice",
        groups=groups,
        state=state,
    )
    assert offered(session) == expected
    assert [tool.name for tool in session.available] == expected


async def test_absent_and_empty_groups_stay_distinct(toolbus: ToolTestKit) -> None:
    snapshot = workflow_snapshot(
        extra_tools={
            "joke": {
                "type": "tool-service",
                "name": "joke",
                "description": "Tell a joke",
                "service": "completion-service",
            }
        }
    )
    registry = load_registry(snapshot)
    absent = open_session(toolbus, registry, audit=ListAuditSink(), user="u", groups=None)
    empty = open_session(toolbus, registry, audit=ListAuditSink(), user="u", groups=[])
    assert offered(absent) == ["joke"]
    assert offered(empty) == []
    assert absent.requested_groups is None and absent.groups == ("default",)
    assert empty.requested_groups == () and empty.groups == ()


async def test_a_failing_tool_leaves_the_state_unchanged(toolbus: ToolTestKit) -> None:
    await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    session = open_session(
        toolbus, workflow_registry(), audit=audit, user="alice", groups=WORKFLOW_GROUPS
    )
    async with session:
        await session.call("knowledge-query", {"question": "q"})
        assert session.state == "analysis"

        outcome = await session.call("complex-analysis", {"dataset": BROKEN_DATASET}, "c-9")

        assert outcome.status == "error" and not outcome.ok
        assert outcome.error_type == "tool-service-error"
        assert "data set 'broken' is corrupt" in outcome.observation
        assert outcome.transition is None
        assert session.state == outcome.state == "analysis"
        assert offered(session) == ANALYSIS_TOOLS
        assert outcome.as_openai_message() == {
            "role": "tool",
            "tool_call_id": "c-9",
            "content": outcome.observation,
        }
    assert [t.tool for t in session.transitions] == ["knowledge-query"]
    assert [(c.tool, c.status, c.error_type) for c in audit.records[0].calls] == [
        ("knowledge-query", "ok", None),
        ("complex-analysis", "error", "tool-service-error"),
    ]


async def test_a_tool_without_a_state_keeps_the_current_one(toolbus: ToolTestKit) -> None:
    await toolbus.serve(*SERVICES)
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        user="bob",
        groups=["write"],
        state="analysis",
    )
    outcome = await session.call("graph-update", {"entity": "Acme", "operation": "add"})
    assert outcome.ok and outcome.observation == "[bob] add Acme: done"
    assert outcome.transition is None and session.state == "analysis"
    assert session.transitions == ()


async def test_llm_arguments_may_be_json_text_and_bad_text_makes_no_call(
    toolbus: ToolTestKit,
) -> None:
    [host, *_] = await toolbus.serve(*SERVICES)
    session = open_session(
        toolbus, workflow_registry(), audit=ListAuditSink(), user="alice", groups=["knowledge"]
    )
    bad = await session.call("knowledge-query", '{"question": ', "c-1")
    assert bad.status == "error" and bad.error_type == "bad-request"
    assert "not valid JSON" in bad.observation and "No call was made" in bad.observation
    listed = await session.call("knowledge-query", '["a list"]')
    assert listed.status == "error" and "must be a JSON object" in listed.observation
    assert host.handled == 0
    assert session.state == "undefined"

    good = await session.call("knowledge-query", '{"question": "who?"}', "c-2")
    assert good.ok and session.state == "analysis"
    assert host.handled == 1


async def test_an_argument_the_tool_does_not_declare_makes_no_call_and_is_named(
    toolbus: ToolTestKit,
) -> None:
    [host, *_] = await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    extra = {
        "open-query": {
            **workflow_snapshot()["tool"]["knowledge-query"],
            "name": "open-query",
            "additional-arguments": True,
        }
    }
    registry = load_registry(workflow_snapshot(extra_tools=extra))
    async with open_session(
        toolbus, registry, audit=audit, user="alice", groups=["knowledge"]
    ) as session:
        smuggled = await session.call(
            "knowledge-query", {"question": "who?", "collection": "other"}, "c-1"
        )
        streamed = await session.stream("knowledge-query", {"question": "who?", "limit": 3})
        assert host.handled == 0 and session.state == "undefined"
        opened = await session.call("open-query", {"question": "who?", "collection": "other"})

    assert smuggled.status == "error" and smuggled.error_type == "bad-request"
    assert "no argument 'collection'; it takes 'question'" in smuggled.observation
    assert "No call was made" in smuggled.observation
    assert not isinstance(streamed, ToolStream) and "'limit'" in streamed.observation
    assert opened.ok and host.handled == 1  # a tool that takes any arguments
    [record] = audit.records
    assert [(c.tool, c.error_type) for c in record.calls][:2] == [
        ("knowledge-query", "bad-request"),
        ("knowledge-query", "bad-request"),
    ]


async def test_tool_lists_come_in_every_llm_format(toolbus: ToolTestKit) -> None:
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        user="alice",
        groups=["admin"],
        state="results",
    )
    [openai] = session.tools("openai")
    [mcp] = session.tools("mcp")
    [anthropic] = session.tools("anthropic")
    assert openai["type"] == "function" and openai["function"]["name"] == "reset-workflow"
    assert mcp["name"] == "reset-workflow" and mcp["inputSchema"]["type"] == "object"
    assert anthropic["name"] == "reset-workflow" and "input_schema" in anthropic
    # The list is the caller's own: changing it does not change the next one.
    listing = session.tools()
    listing.clear()
    assert len(session.tools()) == 1
    with pytest.raises(ValueError, match="unknown tool-list format 'gemini'; use one of"):
        session.tools("gemini")  # type: ignore[arg-type]
    nothing = open_session(toolbus, workflow_registry(), audit=ListAuditSink(), user="u", groups=[])
    with pytest.raises(ValueError, match="unknown tool-list format"):
        nothing.tools("gemini")  # type: ignore[arg-type]


async def test_a_running_session_keeps_the_configuration_it_started_with(
    toolbus: ToolTestKit,
) -> None:
    await toolbus.serve(*SERVICES)
    tools = toolbus.tools(workflow_registry())
    session = AgentSession(tools, user="alice", groups=WORKFLOW_GROUPS, audit=ListAuditSink())

    # A reload replaces the facade's registry; here, with knowledge-query gone.
    reloaded = workflow_snapshot()
    del reloaded["tool"]["knowledge-query"]
    tools.registry = load_registry(reloaded)

    assert offered(session) == INITIAL_TOOLS
    assert (await session.call("knowledge-query", {"question": "q"})).ok
    assert session.state == "analysis"
    fresh = AgentSession(tools, user="alice", groups=WORKFLOW_GROUPS, audit=ListAuditSink())
    assert offered(fresh) == ["text-completion"]


async def test_a_timeout_is_an_observation_and_keeps_the_state(toolbus: ToolTestKit) -> None:
    # No service is running, so the call can only time out.
    session = open_session(
        toolbus,
        workflow_registry(),
        audit=ListAuditSink(),
        user="alice",
        groups=["knowledge"],
        timeout=0.02,
    )
    outcome = await session.call("knowledge-query", {"question": "q"})
    assert outcome.status == "error" and outcome.error_type == "deadline-exceeded"
    assert "did not answer within" in outcome.observation
    assert session.state == "undefined"


async def test_a_broken_bus_raises_instead_of_answering_the_llm() -> None:
    bus = await connect("memory://session-broken-bus")
    audit = ListAuditSink()
    async with ToolServiceClient(bus) as client:
        await bus.close()
        session = AgentSession(
            client, workflow_registry(), user="alice", groups=["knowledge"], audit=audit
        )
        with pytest.raises(BusClosed):
            async with session:
                await session.call("knowledge-query", {"question": "q"}, "c-1")
    [record] = audit.records
    assert record.outcome == "failed" and record.error == "BusClosed"
    assert [(c.status, c.error_type) for c in record.calls] == [("failed", "BusClosed")]
    assert record.final_state == "undefined"


async def test_a_cancelled_call_is_audited_as_cancelled(toolbus: ToolTestKit) -> None:
    started = anyio.Event()
    release = anyio.Event()

    from toolbus.application.calls.service import tool_service

    @tool_service("knowledge-service", config_params=["collection"])
    async def slow(question: str) -> str:
        started.set()
        await release.wait()
        return "late"

    await toolbus.serve(slow)
    audit = ListAuditSink()
    session = open_session(
        toolbus, workflow_registry(), audit=audit, user="alice", groups=["knowledge"]
    )
    outcomes: list[Any] = []
    async with session:
        async with anyio.create_task_group() as tasks:

            async def call() -> None:
                outcomes.append(await session.call("knowledge-query", {"question": "q"}))

            tasks.start_soon(call)
            await started.wait()
            tasks.cancel_scope.cancel()
        release.set()  # let the service finish, so the host drains at once
    assert outcomes == []
    assert session.state == "undefined"
    assert [c.status for c in audit.records[0].calls] == ["cancelled"]


async def test_a_closed_session_refuses_further_calls(toolbus: ToolTestKit) -> None:
    session = open_session(
        toolbus, workflow_registry(), audit=ListAuditSink(), user="alice", groups=["knowledge"]
    )
    await session.close()
    assert session.closed
    with pytest.raises(RuntimeError, match="is closed; start a new AgentSession"):
        await session.call("knowledge-query", {"question": "q"})


async def test_a_client_needs_a_registry(toolbus: ToolTestKit) -> None:
    with pytest.raises(TypeError, match="pass registry="):
        AgentSession(toolbus.client, user="alice")


async def test_the_agent_loop_in_the_docs_runs_as_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = Path(__file__).parents[2] / "docs" / "agent-sessions.md"
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL)
    [example] = [block for block in blocks if "def scripted_model" in block]
    namespace: dict[str, Any] = {"__name__": "agent_sessions_example"}
    exec(compile(example, str(page), "exec"), namespace)
    audit = ListAuditSink()
    # Keep the example's record out of the process-wide logger and metrics.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("toolbus.application.agent.rules._DEFAULT_SINK", audit)
        patch.setattr("toolbus.application.agent.rules.default_metrics", ToolbusMetrics.disabled)
        answer = await namespace["main"]()
    printed = re.search(
        r"It prints:\n\n```text\n(.*?)```", page.read_text(encoding="utf-8"), re.DOTALL
    )
    assert printed is not None
    assert capsys.readouterr().out == printed.group(1)
    assert answer == "Here is what I found: 2 partners; the strongest is Acme."
    [record] = audit.records
    assert record.user == "alice" and record.final_state == "results"


def test_the_shared_tool_list_cache_is_bounded_by_weight() -> None:
    from toolbus.application.agent.caches import IdentityCache

    cache: IdentityCache[object, list[int]] = IdentityCache(5, weigh=len)
    keys = [object() for _ in range(3)]
    assert cache.get(keys[0], "f", lambda _: [1, 2]) == [1, 2]
    cache.get(keys[1], "f", lambda _: [3, 4])
    cache.get(keys[0], "f", lambda _: [])  # a hit: keys[0] is now the most recent
    cache.get(keys[2], "f", lambda _: [5, 6])  # weight 6 > 5: the oldest, keys[1], goes
    assert cache.get(keys[0], "f", lambda _: [-1]) == [1, 2]
    assert cache.get(keys[1], "f", lambda _: [-1]) == [-1]
    # One entry heavier than the whole budget is still kept (until the next one comes).
    assert cache.get(keys[2], "g", lambda _: list(range(9))) == list(range(9))


async def test_a_closed_session_is_freed_as_soon_as_it_is_dropped(toolbus: ToolTestKit) -> None:
    # A session that reached into itself through its call runner was a reference
    # cycle: every one waited for the cycle collector, which a busy gateway then ran
    # over thousands of them. Closed, it must go with its last reference.
    await toolbus.serve(*SERVICES)
    session = open_session(
        toolbus, workflow_registry(), audit=ListAuditSink(), user="alice", groups=WORKFLOW_GROUPS
    )
    async with session:
        outcome = await session.call("knowledge-query", {"question": "q"})
    assert outcome.transition is not None and session.state == "analysis"
    gone = weakref.ref(session)
    gc.disable()
    try:
        del session
        assert gone() is None
    finally:
        gc.enable()


async def test_a_closed_session_keeps_its_final_state(toolbus: ToolTestKit) -> None:
    await toolbus.serve(*SERVICES)
    audit = ListAuditSink()
    session = open_session(
        toolbus, workflow_registry(), audit=audit, user="alice", groups=WORKFLOW_GROUPS
    )
    async with session:
        await session.call("knowledge-query", {"question": "q"})
    assert session.state == "analysis" == audit.records[0].final_state
    with pytest.raises(RuntimeError, match="closed"):
        await session.call("text-completion", {"prompt": "p"})
    assert session.state == "analysis"
