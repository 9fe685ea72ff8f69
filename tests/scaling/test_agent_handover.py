"""An agent run whose replica is SIGKILLed mid-iteration finishes on another replica.

Two ``toolbus agent serve`` processes on the 3-node NATS cluster, their runs
checkpointed in the store (R3 key-value buckets, or Redis), the agent's
requests on a persistent queue. The first replica makes the first iteration's
call and starts the second iteration's; it is SIGKILLed while that call is
running. The request is delivered again to the other replica, which goes on
from the checkpoint: the first call is not made again, the second is sent
again under the same call id and answered from the service's memory, and the
asker (an ``AgentClient``, as ``toolbus ask`` uses) gets the answer. Every
tool ran exactly once.
"""

from __future__ import annotations

import signal
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import pytest

from tests.doors.processes import door_process
from tests.nats.cluster import NatsCluster
from tests.scaling.deployment import GROUPS, Deployment
from tests.support.model_server import ModelServer
from toolbus.application.agent.client import AgentClient
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.plugins import connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

#: Seconds before JetStream delivers an unacknowledged request again.
ACK_WAIT = 2


async def test_a_run_whose_replica_dies_mid_iteration_finishes_on_another(
    store_url: tuple[str, dict[str, object]],
    scaling_cluster: NatsCluster,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    state, options = store_url
    deployment = Deployment(
        tmp_path,
        scaling_cluster.url(),
        state,
        options,
        broker_options={"ack_wait": ACK_WAIT, "replicas": 3},
        persistent=True,
    )
    deployment.holding = True
    queues = {
        "request_queue": f"persistent://tg/request/agent-{deployment.suffix}",
        "response_queue": f"non-persistent://tg/response/agent-{deployment.suffix}",
    }
    question = f"step in and work ({deployment.suffix})"
    model_server.play(
        [
            {"calls": [{"name": "step-in", "arguments": {"n": 0}}]},
            {"calls": [{"name": "work", "arguments": {"n": 1}}]},
            {"text": "Stepped in and worked."},
        ]
    )
    argv = ["agent", "serve", "--config", str(deployment.config), "--request-queue"]
    argv += [queues["request_queue"], "--response-queue", queues["response_queue"]]
    argv += ["--llm", model_server.openai_url()]
    environment = deployment.environment
    events: list[AgentEvent] = []
    bus = await connect(deployment.broker)
    async with AsyncExitStack() as stack:
        stack.push_async_callback(bus.close)
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        first = await stack.enter_async_context(
            # (Each replica's last argument differs: each writes a log of its own.)
            door_process(
                [*argv, "--concurrency", "4"],
                cwd=tmp_path,
                environment=environment,
                ready="serving agent",
            )
        )
        agents = await stack.enter_async_context(AgentClient(bus, **queues))
        request = AgentRequest(question=question, user="alice", group=GROUPS)

        async def ask() -> None:
            async for event in agents.ask(request, timeout=120):
                events.append(event)

        with anyio.fail_after(120):
            async with anyio.create_task_group() as asking:
                asking.start_soon(ask)
                await deployment.working.wait()  # the second iteration's call is running
                second = await stack.enter_async_context(
                    door_process(argv, cwd=tmp_path, environment=environment, ready="serving agent")
                )
                first.process.send_signal(signal.SIGKILL)
                await first.process.wait()
                deployment.release.set()  # the dead replica's call ends, answering nobody
            # ask() has its last event: the request was answered by the second replica.
        assert second.process.returncode is None

    final = events[-1]
    assert final.chunk_type == "answer", events
    assert final.content == "Stepped in and worked."
    assert final.state == "working"
    assert dict(deployment.runs) == {("step-in", 0): 1, ("work", 1): 1}
