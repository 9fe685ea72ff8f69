"""A replica killed (SIGKILL) mid-call on a persistent queue: the call is answered by another."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.pulsar.processes import child_environment, toolbus_command, wait_for_line
from tests.pulsar.replica_service import STARTED
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.service import tool_service
from toolbus.testing.conformance import fresh_queue
from toolbus_pulsar import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


async def test_a_killed_replica_s_call_is_redelivered_to_another(
    pulsar_url: str, tmp_path: Path
) -> None:
    request_queue = fresh_queue(persistent=True, kind="request")
    response_queue = fresh_queue(kind="response")
    service_id = f"fragile-{uuid.uuid4().hex[:8]}"
    env = child_environment(
        REPLICA_SERVICE_ID=service_id,
        REPLICA_REQUEST_QUEUE=request_queue,
        REPLICA_RESPONSE_QUEUE=response_queue,
    )
    argv = [*toolbus_command(), "serve", "tests.pulsar.replica_service:hangs"]
    doomed = await anyio.open_process(
        [*argv, "--broker", pulsar_url],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert doomed.stderr is not None and doomed.stdout is not None
        await wait_for_line(doomed.stderr, f"serving {service_id}", timeout=30)

        @tool_service(service_id, request_queue=request_queue, response_queue=response_queue)
        async def survivor(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            return f"answered by the survivor for {user}"

        bus = await connect(pulsar_url)
        try:
            async with ToolServiceClient(bus, default_timeout=30) as client:
                answer: list[str] = []
                answered = anyio.Event()
                async with anyio.create_task_group() as tasks:

                    async def call() -> None:
                        answer.append(
                            await client.call(
                                request_queue=request_queue,
                                response_queue=response_queue,
                                user="alice",
                            )
                        )
                        answered.set()

                    tasks.start_soon(call)
                    await wait_for_line(doomed.stdout, STARTED, timeout=30)
                    doomed.kill()  # SIGKILL: no drain, no ack, no goodbye to the broker
                    await doomed.wait()
                    # The survivor joins only now: the broker must hand it the call the
                    # dead replica had taken and never acknowledged.
                    async with running(bus, survivor):
                        with anyio.fail_after(30):
                            await answered.wait()
                assert answer == ["answered by the survivor for alice"]
        finally:
            await bus.close()
    finally:
        if doomed.returncode is None:
            doomed.kill()
        await doomed.aclose()
