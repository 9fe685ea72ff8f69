"""Two MCP HTTP bridge replicas behind a round-robin load balancer, on NATS key-value and Redis.

The MCP SDK's own client speaks to haproxy, which sends each request to the
next ``toolbus mcp serve --transport http`` replica in turn. The 2026-07-28
revision has no session: the caller's workflow (its state) is found by user,
groups and the client's workflow key, in the store every replica shares, so
ten calls alternating replicas keep moving one workflow, and SIGKILLing a
replica loses nothing. A client listening for changes on one replica is told
when a call through the other one moved its workflow. An MCP task is answered
and cancelled through either replica, and survives the one it started on.
"""

from __future__ import annotations

import signal
from contextlib import AsyncExitStack
from pathlib import Path

import pytest
from mcp.client.extension import advertise

from tests.mcp.support import http_client, next_change
from tests.mcp.tasks_client import TASKS, call_raw, task_cancel, task_get, until_final
from tests.nats.cluster import NatsCluster
from tests.scaling.balancer import round_robin
from tests.scaling.deployment import ALICE_KEY, GROUPS, TEN_CALLS, Deployment
from tests.support.servers import LOOPBACK

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.broker]

MCP = ("mcp", "serve", "--transport", "http", "--sign-key", "env:SIGN_KEY")
GATE = {"Toolbus-Groups": ",".join(GROUPS)}


def names(listed: object) -> list[str]:
    return sorted(tool.name for tool in listed.tools)  # type: ignore[attr-defined]


async def test_a_workflow_alternates_replicas_and_survives_one(
    store_url: tuple[str, dict[str, object]], scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    state, options = store_url
    deployment = Deployment(tmp_path, scaling_cluster.url(), state, options)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas())
        left, left_port = await stack.enter_async_context(deployment.door(*MCP))
        _, right_port = await stack.enter_async_context(deployment.door(*MCP))
        base = stack.enter_context(round_robin([left_port, right_port], tmp_path / "haproxy"))
        client = await stack.enter_async_context(http_client(f"{base}/mcp", ALICE_KEY, GATE))
        # A second client of the same user and groups, listening on one replica directly.
        listener = await stack.enter_async_context(
            http_client(f"http://{LOOPBACK}:{right_port}/mcp", ALICE_KEY, GATE)
        )

        assert names(await client.list_tools()) == ["step-in"]
        for n, (tool, _) in enumerate(TEN_CALLS):
            result = await client.call_tool(tool, {"n": n})
            assert not result.is_error, result.content[0].text
            assert result.content[0].text == f"{tool} {n}"

        # A client listening on the right replica is told of a move made on the left one.
        direct = await stack.enter_async_context(
            http_client(f"http://{LOOPBACK}:{left_port}/mcp", ALICE_KEY, GATE)
        )
        async with listener.listen(tools_list_changed=True) as changes:
            result = await direct.call_tool("step-in", {"n": 10})
            assert not result.is_error, result.content[0].text
            await next_change(changes)

        # The replica that served the last call dies; the workflow goes on through the other.
        left.process.send_signal(signal.SIGKILL)
        await left.process.wait()
        result = await client.call_tool("work", {"n": 11})
        assert not result.is_error, result.content[0].text
        assert names(await client.list_tools()) == ["step-out", "work"]

    assert sorted(deployment.runs.values()) == [1] * 12, deployment.runs


async def test_a_task_survives_the_replica_it_started_on(
    scaling_cluster: NatsCluster, tmp_path: Path
) -> None:
    state = scaling_cluster.url()
    options = {"replicas": 3, "bucket": "toolbus-scaling"}
    deployment = Deployment(tmp_path, scaling_cluster.url(), state, options, holding=True)
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(deployment.tool_replicas())
        left, left_port = await stack.enter_async_context(deployment.door(*MCP))
        _, right_port = await stack.enter_async_context(deployment.door(*MCP))
        tasks = {"extensions": [advertise(TASKS)]}
        on_left = await stack.enter_async_context(
            http_client(f"http://{LOOPBACK}:{left_port}/mcp", ALICE_KEY, GATE, **tasks)
        )
        on_right = await stack.enter_async_context(
            http_client(f"http://{LOOPBACK}:{right_port}/mcp", ALICE_KEY, GATE, **tasks)
        )
        stepped = await on_left.call_tool("step-in", {"n": 0})
        assert not stepped.is_error, stepped.content[0].text
        created = await call_raw(on_left, "work", {"n": 1})  # held by the tool: a task
        assert created["resultType"] == "task", created
        await deployment.working.wait()
        seen = await task_get(on_right, created["taskId"])  # any replica answers for it
        # Another task of the same call, cancelled through the other replica.
        doomed = await call_raw(on_left, "work", {"n": 2})
        await task_cancel(on_right, doomed["taskId"])
        cancelled = await task_get(on_left, doomed["taskId"])

        left.process.send_signal(signal.SIGKILL)  # the replica running it dies
        await left.process.wait()
        deployment.release.set()
        # The other replica goes on with it once the dead one's lease ran out.
        final = await until_final(on_right, created["taskId"], seconds=60)

    assert seen["status"] == "working"
    assert cancelled["status"] == "cancelled"
    assert final["status"] == "completed", final
    assert final["result"]["content"][0]["text"] == "work 1"
