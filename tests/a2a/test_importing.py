"""``toolbus serve a2a URL``: a remote A2A agent, written with a2a-sdk and run as a process,
called as a tool on the bus (nats-server), over real HTTP on 127.0.0.1."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from tests.a2a.conftest import REMOTE_AGENT, ROOT, running
from tests.doors.processes import TOOLBUS
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.registry import LiveRegistry
from toolbus.domain.errors import DeadlineExceeded, ToolServiceError
from toolbus.plugins import connect

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

TOKEN = "remote-agent-token-0123456789"
TOOL = "travel_Booking_Agent"


async def test_a_remote_agent_is_one_tool_that_streams_asks_for_input_and_fails(
    a2a_nats: str, tmp_path: Path
) -> None:
    env = {"PYTHONPATH": str(ROOT), "TRAVEL_TOKEN": TOKEN}
    async with running(
        [*REMOTE_AGENT, "0", TOKEN], r"listening on (\d+)", cwd=tmp_path, env=env
    ) as (
        _,
        found,
        _,
    ):
        url = f"http://127.0.0.1:{found.group(1)}"
        bridge = [TOOLBUS, "serve", "a2a", url, "--toolset", "travel", "--broker", a2a_nats]
        async with (
            running([*bridge, "--bearer-env", "TRAVEL_TOKEN"], "serving", cwd=tmp_path, env=env),
        ):
            bus = await connect(a2a_nats)
            try:
                async with (
                    ToolServiceClient(bus, default_timeout=30) as client,
                    LiveRegistry(bus, follow_config=False) as live,
                ):
                    await live.wait_until(lambda r: TOOL in r.tools, timeout=30)
                    tools = live.tools(client)
                    descriptor = live.registry.tool(TOOL)
                    chunks = [c async for c in tools.stream(TOOL, {"message": "echo to Oslo"})]
                    asked = await tools.call(TOOL, {"message": "ask"})
                    task_id = asked.split("task_id='")[1].split("'")[0]
                    context_id = asked.split("context_id='")[1].split("'")[0]
                    booked = await tools.call(
                        TOOL, {"message": "Lima", "task_id": task_id, "context_id": context_id}
                    )
                    with pytest.raises(ToolServiceError) as failed:
                        await tools.call(TOOL, {"message": "fail"})
                    with pytest.raises(ToolServiceError) as crashed:
                        await tools.call(TOOL, {"message": "crash"})
            finally:
                await bus.close()

    assert "Books trips." in descriptor.description and "book" in descriptor.description
    assert [a.name for a in descriptor.arguments] == ["message", "context_id", "task_id"]
    # The answer came in the agent's chunks, then the context it can be continued in.
    assert "".join(chunks).startswith("to Oslo\n(context_id: ")
    assert len([c for c in chunks if c]) >= 2
    assert "Which city?" in asked
    assert booked.startswith("booked for Lima")
    assert "the booking system is down" in str(failed.value)
    # A protocol error the agent answered with is the agent's failure, named, not an
    # internal error of the bridge.
    assert "A2A agent 'travel' failed" in str(crashed.value)
    assert "internal error" not in str(crashed.value)


async def test_a_token_missing_from_the_environment_is_refused_before_serving(
    a2a_nats: str, tmp_path: Path
) -> None:
    env = {"PYTHONPATH": str(ROOT), "TRAVEL_TOKEN": TOKEN}
    async with running(
        [*REMOTE_AGENT, "0", TOKEN], r"listening on (\d+)", cwd=tmp_path, env=env
    ) as (
        _,
        found,
        _,
    ):
        url = f"http://127.0.0.1:{found.group(1)}/missing"
        bridge = [TOOLBUS, "serve", "a2a", url, "--toolset", "travel", "--broker", a2a_nats]
        result = await anyio.run_process(
            [*bridge, "--bearer-env", "NOT_SET_ANYWHERE"], env={**os.environ, **env}, check=False
        )
    stderr = result.stderr.decode()
    assert result.returncode == 2
    assert "NOT_SET_ANYWHERE" in stderr and "is not set" in stderr
    assert TOKEN not in stderr


async def test_an_agent_that_does_not_answer_in_time_is_a_deadline_named(
    a2a_nats: str, tmp_path: Path
) -> None:
    env = {"PYTHONPATH": str(ROOT), "TRAVEL_TOKEN": TOKEN}
    async with running(
        [*REMOTE_AGENT, "0", TOKEN], r"listening on (\d+)", cwd=tmp_path, env=env
    ) as (_, found, _):
        url = f"http://127.0.0.1:{found.group(1)}"
        bridge = [TOOLBUS, "serve", "a2a", url, "--toolset", "travel", "--broker", a2a_nats]
        bridge += ["--bearer-env", "TRAVEL_TOKEN", "--call-timeout", "1"]
        async with running(bridge, "serving", cwd=tmp_path, env=env):
            bus = await connect(a2a_nats)
            try:
                async with (
                    ToolServiceClient(bus, default_timeout=30) as client,
                    LiveRegistry(bus, follow_config=False) as live,
                ):
                    await live.wait_until(lambda r: TOOL in r.tools, timeout=30)
                    tools = live.tools(client)
                    with pytest.raises(DeadlineExceeded) as late:
                        await tools.call(TOOL, {"message": "wait"})
                    # The bridge goes on serving: the next call is answered.
                    answered = await tools.call(TOOL, {"message": "echo again"})
            finally:
                await bus.close()

    assert "A2A agent 'travel' did not answer within 1 s" in str(late.value)
    assert answered.startswith("again")
