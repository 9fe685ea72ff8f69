"""Calls as tasks over the gateway's API: asked for, required, handed over while they wait
for a person, read and cancelled by their owner (and operators), and answered when the
gateway stops."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from tests.gateway.support import KEYS, RunningGateway, Signer, authenticator, serving, snapshot
from tests.gateway.test_console_session import form_token, log_in
from toolbus import running, tool_service
from toolbus.domain.tasks import Task
from toolbus.plugins import connect
from toolbus_gateway import Gateway, parse_gateway_settings

pytestmark = pytest.mark.anyio

ASYNC = {"Prefer": "respond-async"}


class Slow:
    """A tool that runs until the test lets it finish."""

    def __init__(self, tag: str) -> None:
        self.started = anyio.Event()
        self.finish = anyio.Event()
        self.runs = 0

        @tool_service(
            f"slow-{tag}",
            request_queue=f"non-persistent://gateway-tests/slow/{tag}",
            response_queue=f"non-persistent://gateway-tests/slow-answers/{tag}",
        )
        async def slow(text: str = "") -> str:
            self.runs += 1
            self.started.set()
            await self.finish.wait()
            return f"slowly {text}"

        self.service = slow


@pytest.fixture
def slow(broker_url: str) -> Slow:
    return Slow(broker_url.rsplit("-", 1)[-1])


@pytest.fixture
def approval_wait() -> float:
    return 0.2


def tools(tool_services: tuple[Any, ...], slow: Slow) -> dict[str, Any]:
    echo = tool_services[0]
    config = snapshot(*tool_services)
    config["tool-service"][slow.service.id] = slow.service.descriptor()

    def tool(name: str, service: Any, **extra: Any) -> dict[str, Any]:
        return {
            "type": "tool-service",
            "name": name,
            "description": f"the {name} tool",
            "service": service.id,
            "arguments": [{"name": "text", "type": "string", "description": "text"}],
            **extra,
        }

    config["tool"].update(
        {
            "report": tool("report", slow.service, **{"task-support": "required"}),
            "slow": tool("slow", slow.service),
            "refund": tool("refund", echo),
            "wipe": tool("wipe", echo, **{"task-support": "forbidden"}),
            "move": tool("move", echo, state="moved"),
        }
    )
    return config


@pytest.fixture
async def served(
    broker_url: str,
    tool_services: tuple[Any, ...],
    slow: Slow,
    signer: Signer,
    tmp_path: Path,
    approval_wait: float,
) -> AsyncIterator[RunningGateway]:
    """A gateway where bob approves every call of refund and wipe."""
    bus = await connect(broker_url)
    try:
        async with running(bus, *tool_services, slow.service):
            gateway = Gateway(
                broker_url,
                authenticator=authenticator(signer, tmp_path),
                config=tools(tool_services, slow),
                settings=parse_gateway_settings({}),
                settings_file={
                    "approvals": {"approvers": ["bob"], "tools": ["refund", "wipe"]},
                    "tasks": {"approval-wait": approval_wait},
                },
            )
            try:
                async with serving(gateway) as server:
                    yield server
            finally:
                slow.finish.set()  # a call the test left running ends before its service stops
    finally:
        await bus.close()


async def until(served: RunningGateway, task_id: str, status: str) -> Task:
    """The task once it reaches ``status`` (awaited on the store's watch)."""
    tasks = served.gateway.tasks
    assert tasks is not None
    with anyio.fail_after(15):
        async for task in tasks.book.changes(task_id):
            if task is not None and task.status == status:
                return task
    raise AssertionError("unreachable")


async def test_a_call_asked_to_run_as_a_task_answers_202_and_its_owner_reads_the_result(
    served: RunningGateway, slow: Slow
) -> None:
    async with served.client("alice") as alice:
        started = await alice.post(
            "/v1/tools/slow/call", json={"arguments": {"text": "hi"}}, headers=ASYNC
        )
        assert started.status_code == 202, started.text
        task = started.json()
        assert started.headers["location"] == f"/v1/tasks/{task['id']}"
        assert started.headers["preference-applied"] == "respond-async"
        assert (task["status"], task["owner"], task["tool"]) == ("working", "alice", "slow")
        assert "call" not in task and "runner" not in task  # never what it holds to run
        await slow.started.wait()
        running_now = (await alice.get(started.headers["location"])).json()
        assert running_now["status"] == "working"
        slow.finish.set()
        await until(served, task["id"], "completed")
        done = (await alice.get(f"/v1/tasks/{task['id']}")).json()
        listed = (await alice.get("/v1/tasks")).json()["tasks"]
    assert (done["status"], done["result"], done["state"]) == (
        "completed",
        "slowly hi",
        "undefined",
    )
    assert [t["id"] for t in listed] == [task["id"]]
    assert slow.runs == 1


async def test_a_task_is_nobody_elses_but_an_operator_reads_and_cancels_it(
    served: RunningGateway, slow: Slow
) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        started = await alice.post("/v1/tools/slow/call", json={}, headers=ASYNC)
        task_id = started.json()["id"]
        unknown = await bob.get("/v1/tasks/0123456789abcdef0123456789abcdef")
        for answer in (
            await bob.get(f"/v1/tasks/{task_id}"),
            await bob.delete(f"/v1/tasks/{task_id}"),
        ):
            # Another user's task is answered exactly as one that does not exist.
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"] == "no-such-task"
            assert answer.json()["message"].replace(task_id, "x") == unknown.json()[
                "message"
            ].replace("0123456789abcdef0123456789abcdef", "x")
        assert (await bob.get("/v1/tasks")).json()["tasks"] == []
    async with served.client("ops") as ops:
        seen = await ops.get(f"/v1/tasks/{task_id}")
        cancelled = await ops.delete(f"/v1/tasks/{task_id}")
        again = await ops.delete(f"/v1/tasks/{task_id}")
    assert seen.status_code == 200 and seen.json()["owner"] == "alice"
    assert cancelled.status_code == 200, cancelled.text
    assert (cancelled.json()["status"], cancelled.json()["message"]) == (
        "cancelled",
        "cancelled by ops",
    )
    assert again.status_code == 409 and again.json()["error"] == "task-closed"


async def test_task_support_decides_which_calls_become_tasks(served: RunningGateway) -> None:
    async with served.client("alice") as alice:
        required = await alice.post("/v1/tools/report/call", json={})
        optional = await alice.post(
            "/v1/tools/echo/call", json={"arguments": {"text": "later"}}, headers=ASYNC
        )
        waited = await alice.post(
            "/v1/tools/echo/call",
            json={"arguments": {"text": "soon"}},
            headers={"Prefer": "respond-async, wait=10"},
        )
    assert required.status_code == 202, required.text
    assert "preference-applied" not in required.headers  # required, not asked for
    assert optional.status_code == 202
    # A task that ends within the wait the caller allows is answered as the call.
    assert waited.status_code == 200, waited.text
    assert waited.json()["observation"] == "soon"


async def test_a_tool_that_forbids_tasks_waits_in_place_even_for_approval(
    served: RunningGateway,
) -> None:
    door = served.gateway.door
    assert door is not None and door.book is not None
    answers: list[httpx.Response] = []

    async def call() -> None:
        async with served.client("alice") as alice:
            answers.append(
                await alice.post(
                    "/v1/tools/wipe/call", json={"arguments": {"text": "x"}}, headers=ASYNC
                )
            )

    with anyio.fail_after(15):
        async with anyio.create_task_group() as group:
            group.start_soon(call)
            async for _ in door.book.changes():
                pending = await door.book.pending()
                if pending:
                    break
            # Longer than approval-wait: it still waits in place.
            await until_waited(served, 3 * served.gateway.task_settings.approval_wait)
            async with served.client("bob") as bob:
                await bob.post(f"/v1/approvals/{pending[0].id}/approve")
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    assert "preference-applied" not in answer.headers
    async with served.client("alice") as alice:
        assert (await alice.get("/v1/tasks")).json()["tasks"] == []


async def until_waited(served: RunningGateway, seconds: float) -> None:
    """``seconds`` pass with no task started (a task would be a change of the open index)."""
    tasks = served.gateway.tasks
    assert tasks is not None
    with anyio.move_on_after(seconds):
        async for _ in tasks.book.open_changes():
            assert await tasks.book.open() == []


async def test_a_call_waiting_for_approval_longer_than_approval_wait_becomes_its_task(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        waiting = await alice.post("/v1/tools/refund/call", json={"arguments": {"text": "40"}})
        assert waiting.status_code == 202, waiting.text
        task = waiting.json()
        assert "preference-applied" not in waiting.headers
        assert task["status"] == "input-required"
        assert task["message"] == "waiting for approval by bob"
        approvals = (await bob.get("/v1/approvals")).json()["approvals"]
        assert [a["id"] for a in approvals] == [task["approval_id"]]
        approved = await bob.post(f"/v1/approvals/{task['approval_id']}/approve")
        assert approved.status_code == 200, approved.text
        done = await until(served, task["id"], "completed")
    assert done.result == "40"
    # One audit record, with the approved call in it.
    records = [r for r in served.gateway.audit.records if r.user == "alice"]
    assert len(records) == 1 and records[0].calls[-1].approval is not None
    assert records[0].calls[-1].approval.decided_by == "bob"


async def test_cancelling_a_waiting_task_withdraws_its_approval_and_deciding_it_says_so(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        task = (await alice.post("/v1/tools/refund/call", json={"arguments": {"text": "9"}})).json()
        cancelled = await alice.delete(f"/v1/tasks/{task['id']}")
        approval = await bob.get(f"/v1/approvals/{task['approval_id']}")
        decided = await bob.post(f"/v1/approvals/{task['approval_id']}/approve")
        pending = (await bob.get("/v1/approvals")).json()["approvals"]
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["message"] == "cancelled by alice"
    assert approval.json()["status"] == "withdrawn"
    assert "cancelled by alice" in approval.json()["note"]
    assert decided.status_code == 409, decided.text
    assert decided.json()["approval_status"] == "withdrawn"
    assert "will not be made" in decided.json()["message"]
    assert pending == []


async def test_a_session_call_as_a_task_moves_the_session_and_shows_on_its_events(
    served: RunningGateway,
) -> None:
    events: list[tuple[str, Any]] = []
    async with served.client("alice") as alice:
        session = (await alice.post("/v1/sessions", json={})).json()["session_id"]

        async def listen(ready: anyio.Event) -> None:
            async with alice.stream("GET", f"/v1/sessions/{session}/events") as stream:
                name = None
                async for line in stream.aiter_lines():
                    if line.startswith("event:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("data:") and name is not None:
                        events.append((name, line.split(":", 1)[1].strip()))
                        if name == "state":
                            ready.set()
                        if name == "call":
                            return

        with anyio.fail_after(15):
            async with anyio.create_task_group() as group:
                ready = anyio.Event()
                group.start_soon(listen, ready)
                await ready.wait()
                started = await alice.post(
                    f"/v1/sessions/{session}/calls",
                    json={"name": "move", "arguments": {"text": "a"}, "tool_call_id": "c1"},
                    headers=ASYNC,
                )
                assert started.status_code == 202, started.text
        after = (await alice.get(f"/v1/sessions/{session}")).json()
    names = [name for name, _ in events]
    assert names[0] == "state" and names[-1] == "call" and "task" in names
    assert after["state"] == "moved"


@pytest.mark.parametrize("approval_wait", [30.0])
async def test_stopping_answers_the_callers_that_wait_and_withdraws_their_approvals(
    served: RunningGateway,
) -> None:
    """A gateway with no other replica: a call handed to its task and a call waiting in
    place are both answered with the JSON error, their approvals withdrawn."""
    answers: dict[str, httpx.Response] = {}
    door = served.gateway.door
    assert door is not None and door.book is not None

    async def call(tool: str) -> None:
        async with served.client("alice") as alice:
            answers[tool] = await alice.post(
                f"/v1/tools/{tool}/call", json={"arguments": {"text": tool}}
            )

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(call, "wipe")  # waits in place
            group.start_soon(call, "refund")  # handed to its task, waited on for 30 s
            async for _ in door.book.changes():
                pending = await door.book.pending()
                if len(pending) == 2:
                    break
            await served.gateway.stopping()
    for tool in ("wipe", "refund"):
        answer = answers[tool]
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"] == "unavailable"
        assert "stopped before the call was made" in answer.json()["message"]
    for approval in pending:
        now = await door.book.get(approval.id)
        assert now is not None and now.status == "withdrawn", now
    async with served.client("bob") as bob:
        decided = await bob.post(f"/v1/approvals/{pending[0].id}/approve")
    assert decided.status_code == 409 and "will not be made" in decided.json()["message"]


async def test_the_console_lists_running_tasks_and_an_operator_cancels_one(
    served: RunningGateway, slow: Slow
) -> None:
    async with served.client("alice") as alice:
        task = (await alice.post("/v1/tools/slow/call", json={}, headers=ASYNC)).json()
    await slow.started.wait()
    async with httpx.AsyncClient(base_url=served.url, timeout=30) as browser:
        logged_in = await log_in(browser, KEYS["ops"])
        assert logged_in.status_code == 303, logged_in.text
        panel = await browser.get("/console/fragments/tasks")
        assert panel.status_code == 200
        assert f'data-task="{task["id"]}"' in panel.text and "alice" in panel.text
        forged = await browser.post(f"/console/tasks/{task['id']}", data={"csrf": "forged"})
        assert forged.status_code == 403
        page = await browser.get("/console")
        cancelled = await browser.post(
            f"/console/tasks/{task['id']}", data={"csrf": form_token(page.text)}
        )
        assert cancelled.status_code == 303, cancelled.text
        after = await browser.get("/console/fragments/tasks")
    stored = await until(served, task["id"], "cancelled")
    assert stored.message == "cancelled by ops"
    assert "No call is running as a task." in after.text
