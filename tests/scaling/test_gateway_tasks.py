"""Tasks outlive the gateway replica that took them: two ``toolbus gateway`` processes behind
haproxy, on NATS key-value or Redis, the 3-node NATS cluster as the broker.

* a replica SIGKILLed while its task waits for approval: the approval is decided through
  the other replica, which goes on with the task and answers it;
* a long tool call as a task survives its replica (SIGKILLed while the tool runs): the
  other replica sends the call again under its bus call id and the tool runs once;
* ``toolbus call --async`` writes a task that a replica makes after the command exited;
* a replica told to stop (SIGTERM) while a call waits for approval answers its caller
  with the task (JSON, no traceback in its log), and leaves the task to the others;
* a task does not exist for another user (404, as an unknown id).
"""

from __future__ import annotations

import json
import signal
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest

from tests.doors.processes import TOOLBUS, door_environment
from tests.nats.cluster import NatsCluster
from tests.scaling.balancer import SERVED_BY, round_robin
from tests.scaling.deployment import ALICE_KEY, GROUPS, Deployment
from toolbus.application.sealing import load_seal_keys, sealed
from toolbus.application.tasks import TaskBook
from toolbus.domain.tasks import Task
from toolbus.plugins import connect_state

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

BOB_KEY = "bob-scaling-key-0123456789abcdef"
ALICE = {"Authorization": f"Bearer {ALICE_KEY}"}
BOB = {"Authorization": f"Bearer {BOB_KEY}"}
ASYNC = {"Prefer": "respond-async"}


def deployment_with_tasks(
    tmp_path: Path, broker: str, store: tuple[str, dict[str, object]], *, persistent: bool = False
) -> Deployment:
    """The scaling deployment, with bob approving every call of step-in, calls allowed to
    start in ``working`` (where ``work`` is offered), and a short task lease."""
    state, options = store
    deployment = Deployment(tmp_path, broker, state, options, persistent=persistent)
    toml = tmp_path / "toolbus.toml"
    text = toml.read_text().replace(
        f"alice = {json.dumps(GROUPS)}", f"alice = {json.dumps(GROUPS)}\nbob = []"
    )
    toml.write_text(
        text
        + '\n[[credentials.api-keys]]\nuser = "bob"\nenv = "BOB_KEY"\n'
        + '\n[approvals]\napprovers = ["bob"]\ntools = ["step-in"]\n'
        + '\n[doors]\nentry-states = ["undefined", "working"]\n'
        + "\n[tasks]\nlease = 2\napproval-wait = 60\n"
    )
    deployment.environment["BOB_KEY"] = BOB_KEY
    return deployment


@asynccontextmanager
async def task_book(deployment: Deployment) -> AsyncIterator[TaskBook]:
    """The replicas' tasks, read as they keep them (sealed with their key)."""
    store = await connect_state(deployment.state, deployment.state_options)
    keys = load_seal_keys(["env:SEAL_KEY"], environ=deployment.environment)
    try:
        yield TaskBook(sealed(store, keys))
    finally:
        await store.close()


async def until(book: TaskBook, task_id: str, status: str, seconds: float = 30) -> Task:
    with anyio.fail_after(seconds):
        async for task in book.changes(task_id):
            if task is not None and task.status == status:
                return task
    raise AssertionError("unreachable")


async def test_a_task_waiting_for_approval_outlives_its_replica(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    deployment = deployment_with_tasks(tmp_path, scaling_cluster.url(), store_url)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas())
        left, left_port = await stack.enter_async_context(deployment.door("gateway"))
        right, right_port = await stack.enter_async_context(deployment.door("gateway"))
        replicas = {"r0": left, "r1": right}
        base = stack.enter_context(round_robin([left_port, right_port], tmp_path / "haproxy"))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=90))
        book = await stack.enter_async_context(task_book(deployment))

        started = await http.post(
            "/v1/tools/step-in/call",
            json={"arguments": {"n": 1}, "groups": GROUPS},
            headers={**ALICE, **ASYNC},
        )
        assert started.status_code == 202, started.text
        task_id = started.json()["id"]
        waiting = await until(book, task_id, "input-required")
        assert waiting.message == "waiting for approval by bob"

        # Another user: the task does not exist for them, on either replica.
        for _ in range(2):
            theirs = await http.get(f"/v1/tasks/{task_id}", headers=BOB)
            assert theirs.status_code == 404 and theirs.json()["error"] == "no-such-task"

        # The replica running the task dies; bob approves through the other one.
        dead = started.headers[SERVED_BY]
        replicas[dead].process.send_signal(signal.SIGKILL)
        await replicas[dead].process.wait()
        approved = await http.post(f"/v1/approvals/{waiting.approval_id}/approve", headers=BOB)
        assert approved.status_code == 200, approved.text
        assert approved.headers[SERVED_BY] != dead

        done = await until(book, task_id, "completed")
        read = await http.get(f"/v1/tasks/{task_id}", headers=ALICE)
    assert read.status_code == 200 and read.json()["result"] == "step-in 1"
    assert done.result == "step-in 1"
    assert deployment.runs[("step-in", 1)] == 1


async def test_a_long_tool_call_as_a_task_outlives_its_replica(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    deployment = deployment_with_tasks(tmp_path, scaling_cluster.url(), store_url, persistent=True)
    deployment.holding = True
    async with AsyncExitStack() as stack:
        # One replica of the tools: a call sent again is answered from its memory.
        await stack.enter_async_context(deployment.tool_replicas(1))
        left, left_port = await stack.enter_async_context(deployment.door("gateway"))
        right, right_port = await stack.enter_async_context(deployment.door("gateway"))
        replicas = {"r0": (left, left_port), "r1": (right, right_port)}
        base = stack.enter_context(round_robin([left_port, right_port], tmp_path / "haproxy"))
        http = await stack.enter_async_context(httpx.AsyncClient(base_url=base, timeout=90))
        book = await stack.enter_async_context(task_book(deployment))

        started = await http.post(
            "/v1/tools/work/call",
            json={"arguments": {"n": 7}, "groups": GROUPS, "state": "working"},
            headers={**ALICE, **ASYNC},
        )
        assert started.status_code == 202, started.text
        task_id = started.json()["id"]
        with anyio.fail_after(30):
            await deployment.working.wait()
        dead = started.headers[SERVED_BY]
        replicas[dead][0].process.send_signal(signal.SIGKILL)
        await replicas[dead][0].process.wait()
        deployment.release.set()  # the tool finishes, with nobody left waiting for it
        done = await until(book, task_id, "completed")
        assert done.result == "work 7"
        assert deployment.runs[("work", 7)] == 1

        # toolbus call --async: the command exits, the remaining replica makes the call.
        with anyio.fail_after(60):
            made = await anyio.run_process(
                [TOOLBUS, "call", "step-in", "--async", "-a", "n=8", "-g", GROUPS[0]],
                cwd=tmp_path,
                env=door_environment({**deployment.environment, "TOOLBUS_API_KEY": ALICE_KEY}),
                check=False,
            )
        assert made.returncode == 0, made.stderr.decode()
        cli_task = await until(book, made.stdout.decode().strip(), "input-required")
        assert (cli_task.owner, cli_task.door) == ("alice", "cli")
        approved = await http.post(f"/v1/approvals/{cli_task.approval_id}/approve", headers=BOB)
        assert approved.status_code == 200, approved.text
        assert (await until(book, cli_task.id, "completed")).result == "step-in 8"

        # Told to stop while a call waits for approval: its caller gets the task.
        living, port = replicas["r1" if dead == "r0" else "r0"]
        answers: list[httpx.Response] = []

        async def call() -> None:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as direct:
                answers.append(
                    await direct.post(
                        "/v1/tools/step-in/call",
                        json={"arguments": {"n": 9}, "groups": GROUPS},
                        headers=ALICE,
                        timeout=90,
                    )
                )

        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(call)
                async for _ in book.open_changes():
                    if any(t.status == "input-required" for t in await book.open()):
                        break
                living.process.send_signal(signal.SIGTERM)
        await living.process.wait()
    (answer,) = answers
    assert answer.status_code == 202, answer.text
    assert answer.json()["status"] == "input-required"
    assert answer.headers["location"] == f"/v1/tasks/{answer.json()['id']}"
    log = living.output()
    assert "Traceback" not in log and "CancelledError" not in log, log[-3000:]
    async with task_book(deployment) as book:
        left_over = await book.get(answer.json()["id"])
    # Left to the other replicas (none is left here): not failed, its lease given up.
    assert left_over is not None and left_over.status == "input-required"
    assert left_over.runner_until == 0.0
