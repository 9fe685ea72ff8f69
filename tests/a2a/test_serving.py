"""``toolbus a2a serve`` in front of ``toolbus agent serve`` (the scripted model server as
its model), both processes on nats-server, spoken to by a2a-sdk's client over real HTTP
on 127.0.0.1, through JSON-RPC and HTTP+JSON."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing

import httpx
import pytest
from a2a.client import ClientConfig, create_client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Message,
    Part,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError

from tests.a2a.conftest import running
from tests.doors.processes import TOOLBUS
from tests.support.model_server import ModelServer

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

ALICE, BOB = "a2a-alice-key-0123456789", "a2a-bob-key-0123456789"


def _toml(broker: str) -> str:
    return f"""broker = {json.dumps(broker)}

[permissions]
fallback = []
[permissions.users]
alice = ["default"]
bob = ["default"]

[[credentials.api-keys]]
user = "alice"
env = "A2A_ALICE"

[[credentials.api-keys]]
user = "bob"
env = "A2A_BOB"
"""


@pytest.fixture(scope="module")
async def door(
    a2a_nats: str, model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    directory = tmp_path_factory.mktemp("a2a-door")
    (directory / "toolbus.toml").write_text(_toml(a2a_nats), encoding="utf-8")
    (directory / "config.json").write_text(json.dumps({"tool-service": {}, "tool": {}}))
    env = {"A2A_ALICE": ALICE, "A2A_BOB": BOB, "OPENAI_API_KEY": "scripted-model-key"}
    agent = [TOOLBUS, "agent", "serve", "--llm", model_server.openai_url(max_retries=0)]
    agent += ["--config", "config.json", "--name", "helper", "--description", "Answers."]
    door = [TOOLBUS, "a2a", "serve", "--listen", "127.0.0.1:0"]
    async with (
        running(agent, "serving agent", cwd=directory, env=env),
        running(door, r"serving A2A on (http://\S+) via", cwd=directory, env=env) as (_, found, _),
    ):
        yield found.group(1)


def _message(text: str) -> SendMessageRequest:
    return SendMessageRequest(
        message=Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text=text)])
    )


async def _client(url: str, key: str, binding: str, *, streaming: bool):  # type: ignore[no-untyped-def]
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
    config = ClientConfig(
        httpx_client=http, streaming=streaming, supported_protocol_bindings=[binding]
    )
    return http, await create_client(url, client_config=config)


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_message_is_a_task_answered_by_the_agent(
    door: str, model_server: ModelServer, binding: str
) -> None:
    model_server.play([{"text": "Forty-two, as always."}])
    http, client = await _client(door, ALICE, binding, streaming=False)
    async with aclosing(http):
        [response] = [r async for r in client.send_message(_message("The answer?"))]
        task = response.task
        read = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["Forty-two, as always."]
    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    assert [t.id for t in listed.tasks] == [task.id]
    assert task.history[0].parts[0].text == "The answer?"


async def test_a_stream_carries_the_answer_in_chunks_then_the_final_status(
    door: str, model_server: ModelServer
) -> None:
    long = " ".join(f"word{i}" for i in range(120))  # past the agent's answer hold: streamed
    model_server.play([{"text": long}])
    http, client = await _client(door, ALICE, "JSONRPC", streaming=True)
    async with aclosing(http):
        seen = [r async for r in client.send_message(_message("Talk a while."))]

    kinds = [r.WhichOneof("payload") for r in seen]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [r.artifact_update for r in seen if r.WhichOneof("payload") == "artifact_update"]
    assert len(chunks) > 2
    assert chunks[-1].last_chunk and chunks[-1].artifact.parts[0].text == long
    assert "".join(c.artifact.parts[0].text for c in chunks[:-1]) == long


async def test_a_context_continues_the_conversation(door: str, model_server: ModelServer) -> None:
    model_server.play([{"text": "Noted: blue."}])
    http, client = await _client(door, ALICE, "JSONRPC", streaming=False)
    async with aclosing(http):
        [first] = [r async for r in client.send_message(_message("My colour is blue."))]
        model_server.play([{"text": "It is blue."}])
        again = _message("What is my colour?")
        again.message.context_id = first.task.context_id
        [second] = [r async for r in client.send_message(again)]

    assert second.task.context_id == first.task.context_id
    # The model saw the first exchange before the second question.
    chat = model_server.bodies[-1]["messages"]
    said = [m.get("content") for m in chat]
    assert "My colour is blue." in said and "Noted: blue." in said


async def test_tasks_are_their_owners_and_callers_must_authenticate(
    door: str, model_server: ModelServer
) -> None:
    model_server.play([{"text": "Mine."}])
    http, client = await _client(door, ALICE, "HTTP+JSON", streaming=False)
    async with aclosing(http):
        [mine] = [r async for r in client.send_message(_message("Whose?"))]
    http, other = await _client(door, BOB, "HTTP+JSON", streaming=True)
    async with aclosing(http):
        with pytest.raises(TaskNotFoundError) as hidden:
            await other.get_task(GetTaskRequest(id=mine.task.id))
        with pytest.raises(TaskNotFoundError) as unknown:
            await other.get_task(GetTaskRequest(id=uuid.uuid4().hex))
        theirs = await other.list_tasks(ListTasksRequest())
        with pytest.raises(TaskNotFoundError):
            [r async for r in other.subscribe(SubscribeToTaskRequest(id=mine.task.id))]
    async with httpx.AsyncClient() as anonymous:
        refused = await anonymous.post(
            f"{door}/agents/helper/rest/message:send", json={"message": {}}
        )
        card = await anonymous.get(f"{door}/.well-known/agent-card.json")

    assert (
        str(hidden.value).replace(mine.task.id, "X")
        == str(unknown.value).split(" ", 0)[0].replace(str(unknown.value), str(unknown.value))
        or "not found" in str(hidden.value).lower()
    )
    assert mine.task.id not in [t.id for t in theirs.tasks]
    assert refused.status_code == 401 and "Bearer" in refused.headers["www-authenticate"]
    assert card.status_code == 200 and card.json()["name"] == "helper"
    assert card.json()["capabilities"]["streaming"] is True


async def test_return_immediately_answers_at_once_and_the_task_can_be_read(
    door: str, model_server: ModelServer
) -> None:
    model_server.play([{"text": "Later."}])
    http, client = await _client(door, ALICE, "JSONRPC", streaming=False)
    async with aclosing(http):
        request = _message("Take your time.")
        request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
        [response] = [r async for r in client.send_message(request)]
        final = None
        for _ in range(100):
            final = await client.get_task(GetTaskRequest(id=response.task.id))
            if final.status.state == TaskState.TASK_STATE_COMPLETED:
                break
            import anyio

            await anyio.sleep(0.1)

    assert response.task.status.state in (
        TaskState.TASK_STATE_WORKING,
        TaskState.TASK_STATE_COMPLETED,
    )
    assert final is not None and final.status.state == TaskState.TASK_STATE_COMPLETED
