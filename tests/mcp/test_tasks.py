"""MCP Tasks at the MCP door: the SDK's real client against BusMcpServer, in memory.

A client of the tasks extension gets a task for a call of a task-supporting
tool that does not end in time, polls it with ``tasks/get`` to its result,
cancels it with ``tasks/cancel``, and answers the approval it waits for with
``tasks/update``; another user's task is no task at all. Stream chunks reach
a client that asked for progress as progress notifications.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from typing import Any

import anyio
import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError

from tests.mcp.conformance_tools import APPROVALS, SERVICES, snapshot
from tests.mcp.support import ALICE_TOKEN, http_client
from tests.mcp.tasks_client import (
    TASKS,
    TasksExtension,
    call_raw,
    task_cancel,
    task_get,
    task_update,
    until_final,
)
from toolbus.application.agent.audit import ListAuditSink
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.policy import AccessPolicy
from toolbus.application.doors.settings import parse_door_settings
from toolbus.application.doors.steps import call_steps
from toolbus.application.doors.tasks import CLI_DOOR, CallTasks, call_task
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import UNDEFINED_STATE
from toolbus.plugins import connect_state
from toolbus.testing.kit import ToolTestKit
from toolbus_mcp.serving.running import door_tasks
from toolbus_mcp.serving.server import BusMcpServer, McpCaller
from toolbus_mcp.serving.tasks import McpTasks
from toolbus_mcp.serving.transports import serve_http

pytestmark = pytest.mark.anyio

ALICE = McpCaller("alice")
BOB = McpCaller("bob")


@pytest.fixture
async def kit() -> AsyncIterator[ToolTestKit]:
    async with AsyncExitStack() as stack:
        kit = await ToolTestKit.open(stack)
        await kit.serve(*SERVICES)
        yield kit


@asynccontextmanager
async def serving(kit: ToolTestKit) -> AsyncIterator[tuple[BusMcpServer, CallTasks]]:
    """Alice's MCP server over the suite's tools, its tasks in a store of its own."""
    store = await connect_state(f"memory://mcp-tasks-{uuid.uuid4().hex}")
    tools = kit.tools(load_registry(snapshot()))
    door = FrontDoor(
        tools,
        policy=AccessPolicy(tools.registry.snapshot, None),
        settings=parse_door_settings(None),
        audit=ListAuditSink(),
        metrics=ToolbusMetrics.disabled(),
        steps=call_steps({"approvals": APPROVALS}, store=store),
    )
    server = BusMcpServer(door, caller=ALICE)
    async with door_tasks(door, store, shared=False) as calls:
        McpTasks(server, calls)
        yield server, calls
    await store.close()


def tasks_client(server: BusMcpServer, **options: Any) -> Client:
    return Client(server.server, extensions=[advertise(TASKS)], **options)


def iso(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


async def test_a_call_that_does_not_end_in_time_is_a_task_polled_to_its_result(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, _), tasks_client(server) as client:
        created = await call_raw(client, "slow_compute", {"seconds": 1, "label": "sums"})
        seen = await task_get(client, created["taskId"])
        final = await until_final(client, created["taskId"])

    assert created["resultType"] == "task"
    assert created["status"] == "working" and "result" not in created
    assert created["ttlMs"] is None and created["pollIntervalMs"] == 1000
    assert seen["taskId"] == created["taskId"] and seen["resultType"] == "complete"
    assert final["status"] == "completed"
    assert final["result"] == {
        "content": [{"type": "text", "text": "computed sums in 1s"}],
        "isError": False,
        "resultType": "complete",  # the call's result, as it would have answered
    }
    assert iso(final["lastUpdatedAt"]) >= iso(final["createdAt"])
    assert isinstance(final["ttlMs"], int) and final["ttlMs"] > 3_600_000 - 1


async def test_a_quick_call_answers_in_place_and_forbidden_tools_never_become_tasks(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, _), tasks_client(server) as client:
        quick = await call_raw(client, "slow_compute", {"seconds": 0})
        greeted = await call_raw(client, "greet", {"name": "Ann"})

    assert "taskId" not in quick and quick["content"][0]["text"] == "computed nothing in 0s"
    assert "taskId" not in greeted and greeted["content"][0]["text"] == "Hello, Ann!"


async def test_a_client_without_the_extension_waits_in_place_or_is_refused_a_required_task(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, calls), Client(server.server) as client:
        slow = await client.call_tool("slow_compute", {"seconds": 1})
        with pytest.raises(MCPError) as refused:
            await client.call_tool("failing_job", {})
        with pytest.raises(MCPError) as no_get:
            await task_get(client, "0" * 32)

    assert slow.content[0].text == "computed nothing in 1s"
    for error in (refused.value, no_get.value):
        assert error.code == mcp_types.MISSING_REQUIRED_CLIENT_CAPABILITY
        assert error.error.data == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
    assert "failing_job" in str(refused.value)
    assert calls.runner.running == frozenset()  # nothing ran as a task


async def test_a_tool_error_is_a_completed_task_whose_result_is_an_error(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, _), tasks_client(server) as client:
        created = await call_raw(client, "failing_job", {})
        final = await until_final(client, created["taskId"])

    assert created["resultType"] == "task"  # required: a task at once
    assert final["status"] == "completed" and "error" not in final
    assert final["result"]["isError"] is True
    assert "the job failed, as it always does" in final["result"]["content"][0]["text"]


async def test_a_call_the_door_cannot_make_is_a_failed_task_with_a_json_rpc_error(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, _), tasks_client(server) as client:
        await kit.bus.close()  # the bus fails under the door: no tool can answer
        created = await call_raw(client, "failing_job", {})
        final = await until_final(client, created["taskId"])

    assert final["status"] == "failed" and "result" not in final
    assert final["error"]["code"] == mcp_types.INTERNAL_ERROR
    assert final["error"]["message"].startswith("the call failed inside the door (ref ")
    assert final["statusMessage"] == final["error"]["message"]


async def test_cancelling_a_task_stops_it_and_is_acknowledged_again_once_it_ended(
    kit: ToolTestKit,
) -> None:
    async with serving(kit) as (server, calls), tasks_client(server) as client:
        created = await call_raw(client, "slow_compute", {"seconds": 3})
        ack = await task_cancel(client, created["taskId"])
        after = await task_get(client, created["taskId"])
        again = await task_cancel(client, created["taskId"])
        with pytest.raises(MCPError) as unknown:
            await task_get(client, "f" * 32)

    assert ack == again
    assert set(ack) <= {"resultType", "_meta"} and ack["resultType"] == "complete"
    assert after["status"] == "cancelled" and after["statusMessage"] == "cancelled by alice"
    assert created["taskId"] not in calls.runner.running  # its call was stopped
    assert unknown.value.code == mcp_types.INVALID_PARAMS


async def test_a_task_is_refused_to_another_user_exactly_as_no_task_is(kit: ToolTestKit) -> None:
    async with serving(kit) as (server, calls):
        bobs_server = BusMcpServer(server.door, caller=BOB)
        McpTasks(bobs_server, calls)
        async with tasks_client(server) as alice, tasks_client(bobs_server) as bob:
            created = await call_raw(alice, "slow_compute", {"seconds": 2})
            refusals = []
            for ask in (task_get, task_cancel, task_get):
                for task_id in (created["taskId"], "f" * 32):
                    with pytest.raises(MCPError) as refused:
                        await ask(bob, task_id)
                    refusals.append(refused.value)
            final = await until_final(alice, created["taskId"])

    assert final["status"] == "completed"  # bob's cancel did nothing
    assert {error.code for error in refusals} == {mcp_types.INVALID_PARAMS}
    # Another's task and no task read the same, but for the id.
    mine, none = str(refusals[0]), str(refusals[1])
    assert mine.replace(created["taskId"], "f" * 32) == none


async def test_the_sdk_client_with_a_task_claim_gets_the_result_transparently(
    kit: ToolTestKit,
) -> None:
    extension = TasksExtension()
    async with serving(kit) as (server, _), Client(server.server, extensions=[extension]) as client:
        result = await client.call_tool("slow_compute", {"seconds": 1, "label": "x"})
    assert result.content[0].text == "computed x in 1s"
    assert len(extension.created) == 1


async def test_a_task_waiting_for_its_caller_s_approval_asks_for_it_in_its_input_requests(
    kit: ToolTestKit,
) -> None:
    async def never(context: Any, params: Any) -> mcp_types.ElicitResult:
        raise AssertionError("a task's approval is asked through tasks/get, not elicitation")

    async with (
        serving(kit) as (server, _),
        tasks_client(server, elicitation_callback=never) as client,
    ):
        created = await call_raw(client, "confirm_delete", {"filename": "a.txt"})
        with anyio.fail_after(10):
            waiting = await task_get(client, created["taskId"])
            while waiting["status"] != "input_required":
                await anyio.sleep(0.05)
                waiting = await task_get(client, created["taskId"])
        [key] = waiting["inputRequests"]
        ignored = await task_update(client, created["taskId"], {"unknown": {}})
        still = await task_get(client, created["taskId"])
        answer = {"action": "accept", "content": {"approve": True}}
        ack = await task_update(client, created["taskId"], {key: answer})
        final = await until_final(client, created["taskId"])

    request = waiting["inputRequests"][key]
    assert request["method"] == "elicitation/create"
    assert "confirm_delete" in request["params"]["message"]
    assert waiting["statusMessage"] == "waiting for approval by ops, alice"
    assert ignored["resultType"] == ack["resultType"] == "complete"
    assert still["status"] == "input_required"
    assert final["status"] == "completed"
    assert final["result"]["content"][0]["text"] == "deleted a.txt"


async def test_cancelling_a_task_that_waits_for_approval_withdraws_the_approval(
    kit: ToolTestKit,
) -> None:
    async def never(context: Any, params: Any) -> mcp_types.ElicitResult:
        raise AssertionError("not asked by elicitation")

    async with (
        serving(kit) as (server, _),
        tasks_client(server, elicitation_callback=never) as client,
    ):
        created = await call_raw(client, "confirm_delete", {"filename": "b.txt"})
        with anyio.fail_after(10):
            waiting = await task_get(client, created["taskId"])
            while waiting["status"] != "input_required":
                await anyio.sleep(0.05)
                waiting = await task_get(client, created["taskId"])
        [key] = waiting["inputRequests"]
        await task_cancel(client, created["taskId"])
        book = server.door.book
        assert book is not None
        approval = await book.get(key.removeprefix("approval-"))

    # Nobody can approve it now, and deciding it says its call will not be made.
    assert approval is not None and approval.status == "withdrawn"
    assert approval.note == "its task was cancelled by alice"


async def test_a_task_written_by_call_async_is_made_by_the_mcp_door(kit: ToolTestKit) -> None:
    # As toolbus call --async writes it: no runner answers for it, any door may take it.
    task = call_task(
        door=CLI_DOOR,
        owner="alice",
        tool="greet",
        groups=["default"],
        state=UNDEFINED_STATE,
        request_id=str(uuid.uuid4()),
        arguments={"name": "Ann"},
        ttl=60,
    )
    async with serving(kit) as (_, calls):
        await calls.runner.book.create(task)
        taken = await calls.runner.sweep()
        final = await calls.runner.book.final(task.id, 30)

    assert taken == [task.id]
    assert final is not None and final.status == "completed", final
    assert final.result == "Hello, Ann!"


async def test_stream_chunks_reach_the_client_as_progress_notifications(
    kit: ToolTestKit,
) -> None:
    seen: list[tuple[float, str | None]] = []

    async def progress(value: float, total: float | None, message: str | None) -> None:
        seen.append((value, message))

    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    async with serving(kit) as (server, _), anyio.create_task_group() as group:
        server.caller = None  # over HTTP, the gate says who calls
        port = await group.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, ALICE_TOKEN) as client:
            result = await client.call_tool(
                "test_tool_with_progress", {}, progress_callback=progress
            )
            plain = await client.call_tool("test_tool_with_progress", {})
        group.cancel_scope.cancel()

    assert seen == [(1.0, "0/100 "), (2.0, "50/100 "), (3.0, "100/100 ")]
    assert result.content[0].text == plain.content[0].text == "0/100 50/100 100/100 "


async def test_a_tasks_request_whose_mcp_name_header_names_another_task_is_refused(
    kit: ToolTestKit,
) -> None:
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    }
    headers = {
        "Authorization": f"Bearer {ALICE_TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tasks/get",
    }
    async with serving(kit) as (server, _), anyio.create_task_group() as group:
        server.caller = None
        port = await group.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, ALICE_TOKEN, extensions=[advertise(TASKS)]) as client:
            created = await call_raw(client, "failing_job", {})
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tasks/get",
            "params": {"taskId": created["taskId"], "_meta": meta},
        }
        async with httpx.AsyncClient(timeout=30) as http:
            misnamed = await http.post(url, json=body, headers={**headers, "Mcp-Name": "other"})
            named = await http.post(
                url, json=body, headers={**headers, "Mcp-Name": created["taskId"]}
            )
        group.cancel_scope.cancel()

    assert '"code":-32020' in misnamed.text and "Mcp-Name" in misnamed.text
    assert created["taskId"] in named.text and '"error"' not in named.text


async def test_a_listen_stream_tells_the_caller_of_its_tasks_changes(kit: ToolTestKit) -> None:
    table = CredentialTable([ApiKey.of("alice", ALICE_TOKEN)])

    def listen(task_ids: list[str], extensions: dict[str, Any]) -> dict[str, Any]:
        meta = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {"extensions": extensions},
        }
        return {
            "jsonrpc": "2.0",
            "id": "listen-1",
            "method": "subscriptions/listen",
            "params": {"notifications": {"taskIds": task_ids}, "_meta": meta},
        }

    headers = {
        "Authorization": f"Bearer {ALICE_TOKEN}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    frames: list[dict[str, Any]] = []
    async with serving(kit) as (server, _), anyio.create_task_group() as group:
        server.caller = None
        port = await group.start(
            lambda task_status: serve_http(server, table, port=0, task_status=task_status)
        )
        url = f"http://127.0.0.1:{port}/mcp"
        async with http_client(url, ALICE_TOKEN, extensions=[advertise(TASKS)]) as client:
            created = await call_raw(client, "slow_compute", {"seconds": 1})
        async with httpx.AsyncClient(timeout=30) as http:
            refused = await http.post(url, json=listen([created["taskId"]], {}), headers=headers)
            body = listen([created["taskId"], "f" * 32], {TASKS: {}})
            async with http.stream("POST", url, json=body, headers=headers) as stream:
                with anyio.fail_after(20):
                    async for line in stream.aiter_lines():
                        if line.startswith("data:"):
                            frames.append(json.loads(line.removeprefix("data:")))
                            if frames[-1].get("params", {}).get("status") == "completed":
                                break
        group.cancel_scope.cancel()

    assert '"code":-32021' in refused.text
    ack, *told = frames
    assert ack["method"] == "notifications/subscriptions/acknowledged"
    assert ack["params"]["notifications"]["taskIds"] == [created["taskId"]]  # not another's
    assert {frame["method"] for frame in told} == {"notifications/tasks"}
    assert {frame["params"]["taskId"] for frame in told} == {created["taskId"]}
    subscription = "io.modelcontextprotocol/subscriptionId"
    assert {frame["params"]["_meta"][subscription] for frame in told} == {"listen-1"}
    final = told[-1]["params"]
    assert final["result"]["content"][0]["text"] == "computed nothing in 1s"
