"""Agent runs that wait for approval suspend as tasks, on real parts: ``toolbus agent serve``
processes on the 3-node NATS cluster, their state in NATS key-value buckets or Redis
(sealed), the scripted model server as the model, ``toolbus ask``, ``toolbus approvals``
and ``toolbus tasks`` as their users run them.

* a run waiting for approval frees its worker: the single-concurrency service answers
  another question meanwhile; approved with ``toolbus approvals approve`` (API key),
  the run goes on and ``toolbus ask`` prints its answer;
* the replica that suspended a run is SIGKILLed before the decision; another replica
  goes on with it and the asker gets the answer from there;
* ``toolbus ask --no-wait`` prints the task id; ``toolbus tasks show`` shows the run's
  answer once it is done, and nothing to another user; ``toolbus tasks cancel`` ends a
  suspended run (its asker is told) and withdraws its approval;
* with no gateway at all, the agent service makes the call ``toolbus call --async``
  left in the store.
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import pytest

from tests.doors.processes import TOOLBUS, DoorProcess, door_environment, door_process
from tests.nats.cluster import NatsCluster
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from tests.scaling.test_gateway_tasks import BOB_KEY, deployment_with_tasks, task_book, until
from tests.support.model_server import ModelServer
from toolbus.application.agent.client import AgentClient
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.plugins import connect

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

CAROL_KEY = "carol-scaling-key-0123456789abcdef"
#: Every question's script: step in (bob approves every call of step-in) and work (offered
#: only once stepped in), then the answer.
SCRIPT = [
    {
        "calls": [
            {"name": "step-in", "arguments": {"n": 0}},
            {"name": "work", "arguments": {"n": 1}},
        ]
    },
    {"text": "Done."},
]


class Agents:
    """The deployment's agent replicas and the commands its users run."""

    def __init__(self, deployment: Deployment, model: ModelServer) -> None:
        self.deployment = deployment
        suffix = deployment.suffix
        self.queues = {
            "request_queue": f"non-persistent://tg/request/agent-{suffix}",
            "response_queue": f"non-persistent://tg/response/agent-{suffix}",
        }
        self.queue_options = [
            "--request-queue",
            self.queues["request_queue"],
            "--response-queue",
            self.queues["response_queue"],
        ]
        self.serve = ["agent", "serve", "--config", str(deployment.config), "--llm"]
        self.serve += [model.openai_url(), *self.queue_options]

    def replica(self, name: str, concurrency: int = 1) -> AbstractAsyncContextManager[DoorProcess]:
        # (The last argument names the replica's log.)
        argv = [*self.serve, "--concurrency", str(concurrency), "--system-prompt", name]
        return door_process(
            argv,
            cwd=self.deployment.workdir,
            environment=self.deployment.environment,
            ready="serving agent",
        )

    def ask_argv(self, question: str, *options: str) -> list[str]:
        return ["ask", question, "--user", "alice", "-g", GROUPS[0], *self.queue_options, *options]

    async def command(self, *argv: str, key: str) -> tuple[int, str, str]:
        """``toolbus ARGV`` as the user whose API key is ``key``: exit code, stdout, stderr."""
        with anyio.fail_after(60):
            done = await anyio.run_process(
                [TOOLBUS, *argv],
                cwd=self.deployment.workdir,
                env=door_environment({**self.deployment.environment, "TOOLBUS_API_KEY": key}),
                check=False,
            )
        return done.returncode, done.stdout.decode(), done.stderr.decode()

    async def approve_the_waiting_call(self) -> str:
        """bob lists the calls waiting for him and approves the one there is; its id."""
        code, out, err = await self.command("approvals", "list", "--json", key=BOB_KEY)
        assert code == 0, err
        [approval] = [json.loads(line) for line in out.splitlines()]
        code, out, err = await self.command("approvals", "approve", approval["id"], key=BOB_KEY)
        assert code == 0, err
        return str(approval["id"])


def agents_deployment(
    tmp_path: Path, broker: str, store: tuple[str, dict[str, object]]
) -> Deployment:
    """The tasks deployment (bob approves step-in), with carol, a caller of her own."""
    deployment = deployment_with_tasks(tmp_path, broker, store)
    toml = tmp_path / "toolbus.toml"
    toml.write_text(
        toml.read_text().replace("bob = []", "bob = []\ncarol = []")
        + '\n[[credentials.api-keys]]\nuser = "carol"\nenv = "CAROL_KEY"\n'
    )
    deployment.environment["CAROL_KEY"] = CAROL_KEY
    return deployment


@asynccontextmanager
async def asking(agents: Agents) -> AsyncIterator[AgentClient]:
    """An asker on the deployment's broker, as ``toolbus ask`` asks."""
    bus = await connect(agents.deployment.broker)
    try:
        async with AgentClient(bus, **agents.queues) as client:
            yield client
    finally:
        await bus.close()


async def events_until_waiting(
    client: AgentClient, question: str, events: list[AgentEvent], waiting: anyio.Event
) -> None:
    async for event in client.ask(AgentRequest(question=question, user="alice", group=GROUPS)):
        events.append(event)
        if event.chunk_type == "waiting":
            waiting.set()


async def test_a_waiting_run_frees_its_worker_and_is_answered_once_approved(
    store_url: tuple[str, dict[str, object]],
    scaling_cluster: NatsCluster,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    deployment = agents_deployment(tmp_path, scaling_cluster.url(), store_url)
    agents = Agents(deployment, model_server)
    model_server.play(SCRIPT)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        await stack.enter_async_context(agents.replica("only", concurrency=1))
        waiting: DoorProcess = await stack.enter_async_context(
            door_process(
                agents.ask_argv(f"step in ({deployment.suffix})"),
                cwd=tmp_path,
                environment=deployment.environment,
                ready="waiting for approval by bob",
            )
        )

        # Meanwhile the one worker answers another question, started where work is offered.
        code, out, err = await agents.command(
            *agents.ask_argv(f"work ({deployment.suffix})", "--state", "working"), key=ALICE_KEY
        )
        assert code == 0, err
        assert out.splitlines()[-1] == "Done."
        assert deployment.runs[("work", 1)] == 1 and deployment.runs[("step-in", 0)] == 0

        await agents.approve_the_waiting_call()
        with anyio.fail_after(60):
            await waiting.process.wait()
    output = waiting.output()
    assert waiting.process.returncode == 0, output
    assert "the run waits as task" in output and "toolbus tasks show" in output
    assert "Done." in output.splitlines()
    assert deployment.runs[("step-in", 0)] == 1


async def test_a_suspended_run_whose_replica_was_killed_is_finished_by_another(
    store_url: tuple[str, dict[str, object]],
    scaling_cluster: NatsCluster,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    deployment = agents_deployment(tmp_path, scaling_cluster.url(), store_url)
    agents = Agents(deployment, model_server)
    model_server.play(SCRIPT)
    events: list[AgentEvent] = []
    waiting = anyio.Event()
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        first = await stack.enter_async_context(agents.replica("first"))
        client = await stack.enter_async_context(asking(agents))
        book = await stack.enter_async_context(task_book(deployment))
        with anyio.fail_after(120):
            async with anyio.create_task_group() as group:
                question = f"step in ({deployment.suffix})"
                group.start_soon(events_until_waiting, client, question, events, waiting)
                await waiting.wait()  # the first replica suspended the run
                await stack.enter_async_context(agents.replica("second"))
                first.process.send_signal(signal.SIGKILL)
                await first.process.wait()
                await agents.approve_the_waiting_call()
            # The asker has its last event: the second replica went on with the run.
        [task_id] = [e.task.id for e in events if e.task is not None]
        done = await until(book, task_id, "completed")
    assert events[-1].chunk_type == "answer" and events[-1].content == "Done."
    assert (done.owner, done.door, done.result) == ("alice", "agent", "Done.")
    assert deployment.runs[("step-in", 0)] == 1


async def test_no_wait_then_tasks_show_and_cancel(
    store_url: tuple[str, dict[str, object]],
    scaling_cluster: NatsCluster,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    deployment = agents_deployment(tmp_path, scaling_cluster.url(), store_url)
    agents = Agents(deployment, model_server)
    model_server.play(SCRIPT)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        await stack.enter_async_context(agents.replica("only"))
        book = await stack.enter_async_context(task_book(deployment))

        code, out, err = await agents.command(
            *agents.ask_argv(f"step in ({deployment.suffix})", "--no-wait"), key=ALICE_KEY
        )
        assert code == 0, err
        task_id = out.strip()
        assert "waiting for approval by bob" in err

        # Another user: no such task. Its owner: what it waits for.
        code, out, err = await agents.command("tasks", "show", task_id, key=CAROL_KEY)
        assert code == 2 and f"no task {task_id!r}" in err.lower(), (out, err)
        code, out, err = await agents.command("tasks", "show", task_id, key=ALICE_KEY)
        assert code == 0, err
        assert "input-required" in out and "waiting for approval by bob" in out

        await agents.approve_the_waiting_call()
        await until(book, task_id, "completed")
        code, out, err = await agents.command("tasks", "show", task_id, "--json", key=ALICE_KEY)
        assert code == 0, err
        shown = json.loads(out)
        assert (shown["status"], shown["result"], shown["door"]) == ("completed", "Done.", "agent")

        # A suspended run cancelled from the command line: its asker is told, its approval
        # withdrawn (deciding it says so).
        events: list[AgentEvent] = []
        waiting = anyio.Event()
        client = await stack.enter_async_context(asking(agents))
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                question = f"step in again ({deployment.suffix})"
                group.start_soon(events_until_waiting, client, question, events, waiting)
                await waiting.wait()
                [cancelled_id] = [e.task.id for e in events if e.task is not None]
                code, out, err = await agents.command(
                    "tasks", "cancel", cancelled_id, key=ALICE_KEY
                )
                assert code == 0, err
        [approval_id] = [e.approval.id for e in events if e.chunk_type == "waiting" and e.approval]
        code, out, err = await agents.command("approvals", "approve", approval_id, key=BOB_KEY)
        assert code == 2 and "will not be made" in err, (out, err)
    final = events[-1]
    assert final.chunk_type == "error" and final.error is not None
    assert (final.error.type, final.content) == (
        "cancelled",
        f"the run was cancelled by alice (task {cancelled_id})",
    )
    assert deployment.runs[("step-in", 0)] == 1  # the cancelled run's call was not made


async def test_agent_services_make_the_calls_call_async_leaves(
    store_url: tuple[str, dict[str, object]],
    scaling_cluster: NatsCluster,
    model_server: ModelServer,
    tmp_path: Path,
) -> None:
    deployment = agents_deployment(tmp_path, scaling_cluster.url(), store_url)
    agents = Agents(deployment, model_server)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas(1, verify=False))
        await stack.enter_async_context(agents.replica("only"))  # and no gateway
        book = await stack.enter_async_context(task_book(deployment))
        code, out, err = await agents.command(
            "call", "step-in", "--async", "-a", "n=5", "-g", GROUPS[0], key=ALICE_KEY
        )
        assert code == 0, err
        task = await until(book, out.strip(), "input-required")
        assert (task.door, task.message) == ("cli", "waiting for approval by bob")
        await agents.approve_the_waiting_call()
        done = await until(book, task.id, "completed")
    assert done.result == "step-in 5"
    assert deployment.runs[("step-in", 5)] == 1
