"""Two agent replicas on one NATS queue share the requests; each is answered exactly once."""

from __future__ import annotations

import uuid
from collections import Counter
from contextlib import AsyncExitStack

import anyio
import pytest

from tests.session.support import SERVICES, WORKFLOW_GROUPS, workflow_registry
from tests.support.model_server import ModelServer
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.agent.client import AgentClient
from toolbus.application.agent.loop import AgentLoop
from toolbus.application.agent.service import AgentService
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.tools import Tools
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.plugins import connect_llm
from toolbus_nats import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

REQUESTS = 40


async def test_two_agent_replicas_share_requests_each_answered_once(
    nats_url: str, model_server: ModelServer
) -> None:
    suffix = uuid.uuid4().hex[:8]
    queues = {
        "request_queue": f"non-persistent://tg/request/agent-{suffix}",
        "response_queue": f"non-persistent://tg/response/agent-{suffix}",
    }
    # Conversations are told apart by their question: each gets the script from the start.
    model_server.play(
        [
            {"calls": [{"name": "knowledge-query", "arguments": {"question": "X?"}}]},
            {"text": "Done."},
        ]
    )
    questions = [f"question {n}" for n in range(REQUESTS)]

    tools_bus, client_bus = await connect(nats_url), await connect(nats_url)
    replica_buses = [await connect(nats_url), await connect(nats_url)]
    audit = ListAuditSink()
    replicas: list[AgentService] = []
    results: dict[str, list[AgentEvent]] = {}
    try:
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(running(tools_bus, *SERVICES))
            for bus in replica_buses:
                llm = await connect_llm(model_server.openai_url())
                stack.push_async_callback(llm.aclose)
                tool_client = await stack.enter_async_context(
                    ToolServiceClient(bus, default_timeout=10)
                )
                loop = AgentLoop(
                    llm,
                    Tools(tool_client, workflow_registry()),
                    audit=audit,
                    metrics=ToolbusMetrics.disabled(),
                )
                replicas.append(AgentService(bus, loop, concurrency=4, **queues))
            agents = await stack.enter_async_context(AgentClient(client_bus, **queues))
            async with anyio.create_task_group() as group:
                for replica in replicas:
                    await group.start(replica.serve)

                async def ask(question: str) -> None:
                    request = AgentRequest(question=question, user="alice", group=WORKFLOW_GROUPS)
                    results[question] = [e async for e in agents.ask(request, timeout=20)]

                with anyio.fail_after(60):
                    async with anyio.create_task_group() as asking:
                        for question in questions:
                            asking.start_soon(ask, question)
                group.cancel_scope.cancel()
    finally:
        for bus in [tools_bus, client_bus, *replica_buses]:
            await bus.close()

    for question in questions:
        events = results[question]
        assert [e.chunk_type for e in events] == ["action", "observation", "answer"]
        assert events[-1].content == "Done."
    # Exactly once: one audit record per request, and both replicas did some of the work.
    assert Counter(r.outcome for r in audit.records) == {"completed": REQUESTS}
    shares = [replica.answered for replica in replicas]
    assert sum(shares) == REQUESTS
    assert all(share > 0 for share in shares), shares
