"""An A2A task whose run waits for a person: the wait is not the run's time (``[tasks]
call-timeout``), as it is not the agent's ``time_limit``. ``toolbus a2a serve`` in front of
``toolbus agent serve`` on nats-server, the run suspended in its key-value store."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest
from a2a.types import GetTaskRequest, TaskState
from google.protobuf.json_format import MessageToDict

from tests.a2a.conftest import KEYS, A2ASite, a2a_client, calling, followed, message
from tests.doors.processes import TOOLBUS, door_environment
from tests.support.model_server import ModelServer

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

#: The door's ``[tasks] call-timeout``: seconds a run may take.
CALL_TIMEOUT = 2


async def test_a_run_waiting_for_an_approval_outlasts_the_call_timeout(
    a2a_nats: str, model_server: ModelServer, tmp_path: Path
) -> None:
    site = A2ASite(tmp_path, a2a_nats, state=a2a_nats, tasks=f"call-timeout = {CALL_TIMEOUT}\n")
    key = uuid.uuid4().hex
    async with site.tools(), site.agent(model_server), site.door() as (_, url):
        model_server.play(calling("refund", key, "Refunded."))
        async with (
            a2a_client(url, "alice") as client,
            a2a_client(url, "alice", streaming=True) as streaming,
        ):
            [response] = [r async for r in client.send_message(message("Refund me."))]
            waiting = response.task
            approval = MessageToDict(waiting.status.message.metadata)["toolbus"]["approval"]
            # Time passing is what is tested: the approval waits past the call-timeout.
            await anyio.sleep(CALL_TIMEOUT + 1)
            still = await client.get_task(GetTaskRequest(id=waiting.id))
            assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED, still.status

            async def approve() -> None:
                await anyio.run_process(
                    [TOOLBUS, "approvals", "approve", approval],
                    cwd=site.directory,
                    env=door_environment({**site.environment, "TOOLBUS_API_KEY": KEYS["ops"]}),
                )

            await followed(streaming, waiting.id, approve)
            final = await client.get_task(GetTaskRequest(id=waiting.id))

    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert final.status.state == TaskState.TASK_STATE_COMPLETED, final.status
    assert [p.text for a in final.artifacts for p in a.parts] == ["Refunded."]
