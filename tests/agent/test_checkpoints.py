"""Agent runs checkpointed per step: a run cut off mid-iteration goes on in another loop.

Two loops share an in-memory state store, as two agent replicas share NATS
key-value or Redis (the real hand-over, a replica SIGKILLed, is in
tests/scaling/). The first loop is cut off while a tool call of its second
iteration is running; the second loop, asked the same request id, goes on
from the checkpoint: the first call is not made again, and the call that was
in flight is sent again under the same call id, which the service (on a
persistent queue) answers from memory: every tool runs once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import pytest

from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.checkpoints import RunCheckpoints
from toolbus.application.agent.loop import AgentLimits, AgentLoop
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.service import tool_service
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.config.loading import load_registry
from toolbus.memory.state import connect as connect_state
from toolbus.scripted.llm import ScriptedLLM
from toolbus.scripted.script import Script
from toolbus.testing.kit import ToolTestKit

pytestmark = pytest.mark.anyio

QUEUES = {
    "lookup": ("persistent://tg/request/lookup", "non-persistent://tg/response/lookup"),
    "slow": ("persistent://tg/request/slow", "non-persistent://tg/response/slow"),
}


class Tools:
    def __init__(self) -> None:
        self.runs: Counter[str] = Counter()
        self.slow_started = anyio.Event()
        self.release = anyio.Event()

    def services(self) -> list[object]:
        @tool_service(
            "lookup", request_queue=QUEUES["lookup"][0], response_queue=QUEUES["lookup"][1]
        )
        async def lookup(what: str) -> str:
            self.runs["lookup"] += 1
            return f"found {what}"

        @tool_service("slow", request_queue=QUEUES["slow"][0], response_queue=QUEUES["slow"][1])
        async def slow(what: str) -> str:
            self.runs["slow"] += 1
            self.slow_started.set()
            await self.release.wait()
            return f"slowly {what}"

        return [lookup, slow]


def snapshot() -> dict[str, object]:
    def tool(name: str) -> dict[str, object]:
        return {
            "type": "tool-service",
            "name": name,
            "description": f"the {name} tool",
            "service": name,
            "arguments": [{"name": "what", "type": "string", "description": "what"}],
        }

    services = {
        name: {"id": name, "request-queue": request, "response-queue": response}
        for name, (request, response) in QUEUES.items()
    }
    return {"tool-service": services, "tool": {name: tool(name) for name in QUEUES}}


SCRIPT = [
    {"calls": [{"name": "lookup", "arguments": {"what": "a"}}]},
    {"calls": [{"name": "slow", "arguments": {"what": "b"}}]},
    {"text": "Both done."},
]


@pytest.fixture
async def kit() -> AsyncIterator[tuple[ToolTestKit, Tools]]:
    tools = Tools()
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*tools.services())  # type: ignore[arg-type]
        yield kit, tools


def loop_on(kit: ToolTestKit, script: Script, checkpoints: RunCheckpoints) -> AgentLoop:
    return AgentLoop(
        ScriptedLLM(script),
        kit.tools(load_registry(snapshot())),
        limits=AgentLimits(max_iterations=5, time_limit=30),
        audit=ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        checkpoints=checkpoints,
    )


async def test_a_run_cut_off_mid_iteration_goes_on_from_its_checkpoint(
    kit: tuple[ToolTestKit, Tools],
) -> None:
    toolkit, tools = kit
    store = await connect_state("memory://agent-runs")
    script = Script(SCRIPT)  # one script: the model's place in the conversation is shared
    request = AgentRequest(question="look both up", user="alice")
    first_events: list[AgentEvent] = []
    second_events: list[AgentEvent] = []

    async def first_emit(event: AgentEvent) -> None:
        first_events.append(event)

    async def second_emit(event: AgentEvent) -> None:
        second_events.append(event)

    first = loop_on(toolkit, script, RunCheckpoints(store))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(lambda: first.run(request, emit=first_emit, request_id="run-1"))
            await tools.slow_started.wait()
            group.cancel_scope.cancel()  # the replica is gone, mid-iteration

    second = loop_on(toolkit, script, RunCheckpoints(store))
    tools.release.set()  # the slow call the first replica made finishes, answering nobody
    with anyio.fail_after(10):
        result = await second.run(request, emit=second_emit, request_id="run-1")

    assert result.ok, result.error
    assert result.answer == "Both done."
    assert result.iterations == 3
    assert tools.runs == {"lookup": 1, "slow": 1}  # nothing ran twice
    # The second replica made only the calls not answered before: no second lookup.
    assert [e.tool for e in second_events if e.chunk_type == "action"] == ["slow"]
    assert await RunCheckpoints(store).load("run-1") is None  # answered: nothing left
