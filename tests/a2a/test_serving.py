"""``toolbus a2a serve`` in front of ``toolbus agent serve`` (the scripted model server as
its model, tools served by the test), both processes on nats-server with their state in its
key-value store, spoken to by a2a-sdk's client over real HTTP on 127.0.0.1, through
JSON-RPC and HTTP+JSON."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Part,
    Role,
    SendMessageConfiguration,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import (
    ContentTypeNotSupportedError,
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf.json_format import MessageToDict

from tests.a2a.conftest import (
    AGENT,
    DESCRIPTION,
    KEYS,
    A2ASite,
    a2a_client,
    calling,
    followed,
    message,
)
from tests.doors.processes import TOOLBUS, door_environment
from tests.support.model_server import ModelServer

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture(scope="module")
async def site(
    a2a_nats: str, model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[A2ASite]:
    site = A2ASite(tmp_path_factory.mktemp("a2a-door"), a2a_nats, state=a2a_nats)
    async with site.tools(), site.agent(model_server):
        yield site


@pytest.fixture(scope="module")
async def door(site: A2ASite) -> AsyncIterator[str]:
    async with site.door() as (_, url):
        yield url


def later(request: Any) -> Any:
    request.configuration.CopyFrom(SendMessageConfiguration(return_immediately=True))
    return request


def steps(task: Any) -> list[dict[str, Any]]:
    """The agent's steps in a task's history (the ``toolbus`` metadata of its messages)."""
    agent = [m for m in task.history if m.role == Role.ROLE_AGENT]
    return [MessageToDict(m.metadata).get("toolbus", {}) for m in agent]


@pytest.mark.parametrize("binding", ["JSONRPC", "HTTP+JSON"])
async def test_a_message_is_a_task_answered_by_the_agent(
    door: str, model_server: ModelServer, binding: str
) -> None:
    model_server.play([{"text": "Forty-two, as always."}])
    async with a2a_client(door, "alice", binding=binding) as client:
        [response] = [r async for r in client.send_message(message("The answer?"))]
        task = response.task
        read = await client.get_task(GetTaskRequest(id=task.id))
        listed = await client.list_tasks(ListTasksRequest(context_id=task.context_id))
        with pytest.raises(TaskNotCancelableError):
            await client.cancel_task(CancelTaskRequest(id=task.id))

    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in task.artifacts for p in a.parts] == ["Forty-two, as always."]
    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    assert read.artifacts == task.artifacts
    assert [t.id for t in listed.tasks] == [task.id]
    assert task.history[0].parts[0].text == "The answer?"
    assert task.history[0].task_id == task.id and task.history[0].context_id == task.context_id


async def test_a_stream_carries_the_answer_in_chunks_then_the_final_status(
    door: str, model_server: ModelServer
) -> None:
    long = " ".join(f"word{i}" for i in range(120))  # past the agent's answer hold: streamed
    model_server.play([{"text": long}])
    async with a2a_client(door, "alice", streaming=True) as client:
        seen = [r async for r in client.send_message(message("Talk a while."))]
        # A caller told that the task ended reads it ended.
        read = await client.get_task(GetTaskRequest(id=seen[0].task.id))

    assert read.status.state == TaskState.TASK_STATE_COMPLETED
    kinds = [r.WhichOneof("payload") for r in seen]
    assert kinds[0] == "task" and kinds[-1] == "status_update"
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    chunks = [r.artifact_update for r in seen if r.WhichOneof("payload") == "artifact_update"]
    assert len(chunks) > 2
    # The chunks add up to the answer, its last one included; then the whole answer.
    assert "".join(c.artifact.parts[0].text for c in chunks[:-1]) == long
    assert [c.append for c in chunks[:-1]] == [False] + [True] * (len(chunks) - 2)
    assert chunks[-1].last_chunk and not chunks[-1].append
    assert chunks[-1].artifact.parts[0].text == long


async def test_a_context_continues_the_conversation(door: str, model_server: ModelServer) -> None:
    model_server.play([{"text": "Noted: blue."}])
    async with a2a_client(door, "alice") as client:
        [first] = [r async for r in client.send_message(message("My colour is blue."))]
        model_server.play([{"text": "It is blue."}])
        again = message("What is my colour?", context_id=first.task.context_id)
        [second] = [r async for r in client.send_message(again)]

    assert second.task.context_id == first.task.context_id
    assert second.task.id != first.task.id
    # The model saw the first exchange before the second question.
    said = [m.get("content") for m in model_server.bodies[-1]["messages"]]
    assert "My colour is blue." in said and "Noted: blue." in said


async def test_tasks_are_their_owners_and_another_caller_is_told_they_do_not_exist(
    door: str, model_server: ModelServer
) -> None:
    model_server.play([{"text": "Mine."}])
    async with a2a_client(door, "alice", binding="HTTP+JSON") as client:
        [mine] = [r async for r in client.send_message(message("Whose?"))]
    unknown = uuid.uuid4().hex
    async with a2a_client(door, "bob", binding="HTTP+JSON", streaming=True) as other:
        with pytest.raises(TaskNotFoundError) as hidden:
            await other.get_task(GetTaskRequest(id=mine.task.id))
        with pytest.raises(TaskNotFoundError) as absent:
            await other.get_task(GetTaskRequest(id=unknown))
        with pytest.raises(TaskNotFoundError):
            await other.cancel_task(CancelTaskRequest(id=mine.task.id))
        with pytest.raises(TaskNotFoundError):
            [r async for r in other.subscribe(SubscribeToTaskRequest(id=mine.task.id))]
        theirs = await other.list_tasks(ListTasksRequest())
        # A context id is the caller's own: bob naming alice's starts a conversation afresh.
        model_server.play([{"text": "Hello, stranger."}])
        guessed = [
            r async for r in other.send_message(message("Hi", context_id=mine.task.context_id))
        ]

    assert str(hidden.value).replace(mine.task.id, "ID") == str(absent.value).replace(unknown, "ID")
    assert mine.task.id not in [t.id for t in theirs.tasks]
    said = [m.get("content") for m in model_server.bodies[-1]["messages"]]
    assert "Whose?" not in said and "Mine." not in said
    assert guessed[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_callers_authenticate_with_a_bearer_credential_and_cards_are_public(
    door: str,
) -> None:
    sent = {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "Hi"}]}}
    send = f"{door}/agents/{AGENT}/rest/message:send"
    async with httpx.AsyncClient() as http:
        anonymous = await http.post(send, json=sent)
        wrong = await http.post(send, json=sent, headers={"Authorization": "Bearer nope-nope"})
        twice = await http.post(
            send,
            json=sent,
            headers=[
                ("Authorization", f"Bearer {KEYS['alice']}"),
                ("Authorization", f"Bearer {KEYS['bob']}"),
            ],
        )
        card = await http.get(f"{door}/.well-known/agent-card.json")
        own_card = await http.get(f"{door}/agents/{AGENT}/.well-known/agent-card.json")
        listed = await http.get(f"{door}/agents")
        nobody = await http.get(f"{door}/agents/nobody/.well-known/agent-card.json")

    assert anonymous.status_code == 401, anonymous.text
    assert anonymous.headers["www-authenticate"] == 'Bearer realm="toolbus"'
    assert anonymous.json()["reason"] == "missing"
    assert wrong.status_code == 401 and wrong.json()["reason"] == "unknown-key", wrong.text
    assert "nope-nope" not in wrong.text
    assert twice.status_code == 400 and twice.json()["error"] == "several-credentials"
    assert card.status_code == 200 and card.json() == own_card.json()
    shown = card.json()
    assert (shown["name"], shown["description"]) == (AGENT, DESCRIPTION)
    assert shown["capabilities"]["streaming"] is True
    assert [i["url"] for i in shown["supportedInterfaces"]] == [
        f"{door}/agents/{AGENT}/jsonrpc",
        f"{door}/agents/{AGENT}/rest",
    ]
    assert shown["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]["scheme"] == "Bearer"
    assert {s["id"] for s in shown["skills"]} == {"default"}
    assert "hold" in shown["skills"][0]["description"]
    assert [a["name"] for a in listed.json()["agents"]] == [AGENT]
    assert nobody.status_code == 404 and AGENT in nobody.json()["message"]


async def test_return_immediately_answers_at_once_and_the_task_can_be_followed(
    door: str, site: A2ASite, model_server: ModelServer
) -> None:
    key = uuid.uuid4().hex
    model_server.play(calling("hold", key, "Held and done."))
    async with (
        a2a_client(door, "alice") as client,
        a2a_client(door, "alice", streaming=True) as streaming,
    ):
        [response] = [r async for r in client.send_message(later(message("Hold on.")))]
        await site.reached(key)
        working = await client.get_task(GetTaskRequest(id=response.task.id))

        async def let_go() -> None:
            site.let_go(key)

        seen = await followed(streaming, response.task.id, let_go)
        final = await client.get_task(GetTaskRequest(id=response.task.id))

    assert response.task.status.state == TaskState.TASK_STATE_WORKING
    assert working.status.state == TaskState.TASK_STATE_WORKING
    assert seen[0].task.id == response.task.id
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in final.artifacts for p in a.parts] == ["Held and done."]
    # The run's steps are the task's history: the call, and what it answered.
    assert [s.get("event") for s in steps(final)] == ["thought", "action", "observation"]
    assert steps(final)[1]["tool"] == "hold" and steps(final)[2]["status"] == "ok"


async def test_an_approval_is_input_required_until_a_person_decides(
    door: str, site: A2ASite, model_server: ModelServer
) -> None:
    key = uuid.uuid4().hex
    model_server.play(calling("refund", key, "Refunded."))
    async with (
        a2a_client(door, "alice") as client,
        a2a_client(door, "alice", streaming=True) as streaming,
    ):
        [response] = [r async for r in client.send_message(message("Refund me."))]
        waiting = response.task
        approval = MessageToDict(waiting.status.message.metadata)["toolbus"]["approval"]
        # A message for the waiting task: a person decides, not its caller.
        with pytest.raises(UnsupportedOperationError) as refused:
            [r async for r in client.send_message(message("yes", task_id=waiting.id))]

        async def approve() -> None:
            environment = {"TOOLBUS_API_KEY": KEYS["ops"]}
            await anyio.run_process(
                [TOOLBUS, "approvals", "approve", approval],
                cwd=site.directory,
                env=door_environment({**site.environment, **environment}),
            )

        seen = await followed(streaming, waiting.id, approve)
        final = await client.get_task(GetTaskRequest(id=waiting.id))

    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.parts[0].text == "waiting for approval by ops"
    assert "approvals approve" in str(refused.value)
    states = [r.status_update.status.state for r in seen if r.HasField("status_update")]
    assert states[-1] == TaskState.TASK_STATE_COMPLETED
    assert final.status.state == TaskState.TASK_STATE_COMPLETED
    assert [p.text for a in final.artifacts for p in a.parts] == ["Refunded."]
    assert [s.get("event") for s in steps(final)][-1] == "observation"


async def test_a_working_task_is_cancelled_and_its_streams_end(
    door: str, site: A2ASite, model_server: ModelServer
) -> None:
    key = uuid.uuid4().hex
    model_server.play(calling("hold", key))
    async with (
        a2a_client(door, "alice") as client,
        a2a_client(door, "alice", streaming=True) as streaming,
    ):
        [response] = [r async for r in client.send_message(later(message("Hold on.")))]
        await site.reached(key)
        cancelled = []

        async def cancel() -> None:
            cancelled.append(await client.cancel_task(CancelTaskRequest(id=response.task.id)))

        seen = await followed(streaming, response.task.id, cancel)
        with pytest.raises(UnsupportedOperationError):
            [r async for r in streaming.subscribe(SubscribeToTaskRequest(id=response.task.id))]
    site.let_go(key)

    assert cancelled[0].status.state == TaskState.TASK_STATE_CANCELED
    assert seen[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    assert "cancelled by alice" in seen[-1].status_update.status.message.parts[0].text


async def test_what_the_agent_cannot_read_is_refused_naming_the_fix(door: str) -> None:
    async with a2a_client(door, "alice") as client:
        with pytest.raises(ContentTypeNotSupportedError) as file:
            request = message("Look at this")
            request.message.parts.append(Part(url="https://example.com/a.pdf"))
            [r async for r in client.send_message(request)]
        with pytest.raises(InvalidParamsError) as groups:
            request = message("Hi")
            request.message.metadata.update({"toolbus": {"groups": "billing"}})
            [r async for r in client.send_message(request)]
        with pytest.raises(InvalidParamsError) as unknown:
            request = message("Hi")
            request.message.metadata.update({"toolbus": {"colour": "blue"}})
            [r async for r in client.send_message(request)]

    assert "parts[1]" in str(file.value) and "send the file's content as text" in str(file.value)
    assert "groups must be a list" in str(groups.value)
    assert "'colour'" in str(unknown.value) and "'groups'" in str(unknown.value)
