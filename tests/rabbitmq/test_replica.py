"""A replica killed (SIGKILL) with calls in flight on a persistent queue: none is lost."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import ByteReceiveStream

from tests.pulsar.processes import child_environment, toolbus_command, wait_for_line
from tests.pulsar.replica_service import STARTED
from toolbus import ToolServiceClient, running, tool_service
from toolbus.testing.conformance import fresh_queue
from toolbus_rabbitmq import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

CALLS = 40


async def wait_for_count(stream: ByteReceiveStream, text: str, count: int, timeout: float) -> None:
    """Read ``stream`` until ``text`` has appeared ``count`` times."""
    seen = b""
    with anyio.fail_after(timeout):
        while seen.decode(errors="replace").count(text) < count:
            seen += await stream.receive()


async def test_every_call_a_killed_replica_held_is_answered_by_another(
    rabbitmq_url: str, tmp_path: Path
) -> None:
    request_queue = fresh_queue(persistent=True, kind="request")
    response_queue = fresh_queue(kind="response")
    service_id = f"fragile-{uuid.uuid4().hex[:8]}"
    env = child_environment(
        REPLICA_SERVICE_ID=service_id,
        REPLICA_REQUEST_QUEUE=request_queue,
        REPLICA_RESPONSE_QUEUE=response_queue,
    )
    # The doomed replica takes every call (they all fit its prefetch and its
    # concurrency) and answers none.
    argv = [*toolbus_command(), "serve", "tests.pulsar.replica_service:hangs"]
    doomed = await anyio.open_process(
        [*argv, "--broker", rabbitmq_url],
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
            return f"{arguments['n']} answered by the survivor"

        bus = await connect(rabbitmq_url)
        try:
            async with ToolServiceClient(bus, default_timeout=60) as client:
                answers: dict[int, str] = {}
                all_answered = anyio.Event()
                async with anyio.create_task_group() as tasks:

                    async def call(n: int) -> None:
                        answers[n] = await client.call(
                            request_queue=request_queue,
                            response_queue=response_queue,
                            arguments={"n": n},
                        )
                        if len(answers) == CALLS:
                            all_answered.set()

                    for n in range(CALLS):
                        tasks.start_soon(call, n)
                    await wait_for_count(doomed.stdout, STARTED, CALLS, timeout=30)
                    doomed.kill()  # SIGKILL: no drain, no ack, no goodbye to the broker
                    await doomed.wait()
                    # The survivor joins only now: the broker must hand it every call
                    # the dead replica had taken and never acknowledged.
                    async with running(bus, survivor):
                        with anyio.fail_after(60):
                            await all_answered.wait()
        finally:
            await bus.close()
    finally:
        if doomed.returncode is None:
            doomed.kill()
        await doomed.aclose()

    assert answers == {n: f"{n} answered by the survivor" for n in range(CALLS)}
