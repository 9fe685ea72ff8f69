"""A tool of the agent's run asks its caller: the A2A task is ``input-required`` with the
question, the caller answers it by a message naming the task (from any replica), and the
run goes on with the answer. ``toolbus a2a serve`` in front of ``toolbus agent serve`` on
nats-server, the tool served by the test and asking with ``ask(Elicitation(...))``."""

from __future__ import annotations

import json
import re
import signal
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest
from a2a.client import Client
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Part,
    Role,
    Task,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from google.protobuf.json_format import MessageToDict
from google.protobuf.struct_pb2 import Value

from tests.a2a.conftest import SURE, A2ASite, a2a_client, calling, message
from tests.support.doc_examples import DOCS
from tests.support.model_server import ModelServer
from toolbus.application.tasks import TaskBook
from toolbus.runtime import door_state, seal_keys_of
from toolbus_a2a.serving.settings import DOOR_NAME

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


@pytest.fixture(scope="module")
async def site(
    a2a_nats: str, model_server: ModelServer, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[A2ASite]:
    site = A2ASite(tmp_path_factory.mktemp("a2a-asking"), a2a_nats, state=a2a_nats)
    async with site.tools(), site.agent(model_server):
        yield site


@pytest.fixture(scope="module")
async def doors(site: A2ASite) -> AsyncIterator[tuple[str, str]]:
    """Two replicas of the door on the site's shared store."""
    async with AsyncExitStack() as stack:
        _, first = await stack.enter_async_context(site.door())
        _, second = await stack.enter_async_context(site.door())
        yield first, second


def answering(task: Task, responses: dict[str, Any] | None = None, text: str = "") -> Any:
    """A message answering ``task``: ``responses`` in a data part, or a ``text`` reply."""
    request = message(text or "here", task_id=task.id, context_id=task.context_id)
    if responses is not None:
        del request.message.parts[:]
        data = Value()
        data.struct_value.update({"responses": responses})
        request.message.parts.append(Part(data=data))
    return request


def asked(task: Task) -> dict[str, Any]:
    """The requests the task's status message carries (its data part), by key."""
    [data] = [MessageToDict(p)["data"] for p in task.status.message.parts if p.HasField("data")]
    requests: dict[str, Any] = data["requests"]
    return requests


def observations(task: Task) -> list[str]:
    """What the run's calls answered, as the task's history keeps it."""
    return [
        m.parts[0].text
        for m in task.history
        if m.role == Role.ROLE_AGENT
        and MessageToDict(m.metadata).get("toolbus", {}).get("event") == "observation"
    ]


async def waiting_for_answers(client: Client, key: str) -> Task:
    [response] = [r async for r in client.send_message(message(f"Ship {key}, please."))]
    return response.task


async def test_the_task_asks_the_caller_who_answers_and_the_tool_gets_the_answer(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    first, _ = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Shipped."))
    async with a2a_client(first, "alice") as client:
        waiting = await waiting_for_answers(client, key)
        [(request_key, request)] = asked(waiting).items()
        [response] = [
            r
            async for r in client.send_message(
                answering(waiting, {request_key: {"action": "accept", "content": {"sure": True}}})
            )
        ]
    final = response.task

    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert waiting.status.message.parts[0].text == f"Ship {key}?"
    assert request == {
        "method": "elicitation/create",
        "params": {"message": f"Ship {key}?", "requestedSchema": SURE},
    }
    assert final.status.state == TaskState.TASK_STATE_COMPLETED, final.status
    assert [p.text for a in final.artifacts for p in a.parts] == ["Shipped."]
    assert observations(final) == [f"shipped {key} for alice"]


async def test_a_text_reply_answers_a_one_field_form(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    first, _ = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Kept."))
    async with a2a_client(first, "alice") as client:
        waiting = await waiting_for_answers(client, key)
        with pytest.raises(InvalidParamsError) as unreadable:
            [r async for r in client.send_message(answering(waiting, text="perhaps"))]
        [response] = [r async for r in client.send_message(answering(waiting, text="No"))]

    assert "'perhaps' is not true or false, which 'sure' asks" in str(unreadable.value)
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED, response.task.status
    assert observations(response.task) == [f"kept {key} (accept)"]


async def test_a_wrong_answer_is_refused_naming_the_key_and_the_task_still_waits(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    first, _ = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Shipped."))
    async with a2a_client(first, "alice") as client:
        waiting = await waiting_for_answers(client, key)
        [request_key] = asked(waiting)
        refusals = []
        for wrong in (
            {request_key: {"action": "maybe"}},
            {request_key: {"action": "accept", "content": {"sure": "very"}}},
            {request_key: {"action": "accept", "content": {}}},
            {"colour": {"action": "accept"}},
        ):
            with pytest.raises(InvalidParamsError) as refused:
                [r async for r in client.send_message(answering(waiting, wrong))]
            refusals.append(str(refused.value))
        still = await client.get_task(GetTaskRequest(id=waiting.id))
        answer = {request_key: {"action": "decline"}}
        [response] = [r async for r in client.send_message(answering(waiting, answer))]

    assert f"responses[{request_key!r}]" in refusals[0] and '"action": "accept"' in refusals[0]
    assert "'sure' must be true or false" in refusals[1]
    assert "the form requires 'sure'" in refusals[2]
    assert f"does not ask that; it asks {request_key!r}" in refusals[3]
    assert still.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert asked(still) == asked(waiting)
    assert observations(response.task) == [f"kept {key} (decline)"]


async def test_another_replica_takes_the_answer_and_only_the_owner_may_give_it(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    first, second = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Shipped."))
    async with (
        a2a_client(first, "alice") as client,
        a2a_client(second, "alice") as elsewhere,
        a2a_client(second, "bob") as stranger,
    ):
        waiting = await waiting_for_answers(client, key)
        answer = {next(iter(asked(waiting))): {"action": "accept", "content": {"sure": True}}}
        with pytest.raises(TaskNotFoundError):
            [r async for r in stranger.send_message(answering(waiting, answer))]
        [response] = [r async for r in elsewhere.send_message(answering(waiting, answer))]

    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED, response.task.status
    assert observations(response.task) == [f"shipped {key} for alice"]


async def test_a_stream_shows_the_question_and_goes_on_once_answered(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    first, _ = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Shipped."))
    async with a2a_client(first, "alice", streaming=True) as streaming:
        seen = []
        async for event in streaming.send_message(message(f"Ship {key}, please.")):
            seen.append(event)
            status = event.status_update.status if event.HasField("status_update") else None
            if status is not None and status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
                break
        question = seen[-1].status_update
        task = await streaming.get_task(GetTaskRequest(id=question.task_id))
        answer = {next(iter(asked(task))): {"action": "accept", "content": {"sure": True}}}
        after = [r async for r in streaming.send_message(answering(task, answer))]

    assert question.status.message.parts[0].text == f"Ship {key}?"
    states = [r.status_update.status.state for r in after if r.HasField("status_update")]
    assert TaskState.TASK_STATE_WORKING in states
    assert states[-1] == TaskState.TASK_STATE_COMPLETED


async def test_cancelling_a_task_that_waits_for_answers_ends_it_and_its_run(
    doors: tuple[str, str], site: A2ASite, model_server: ModelServer
) -> None:
    first, second = doors
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Kept, as asked."))
    async with (
        a2a_client(first, "alice") as client,
        a2a_client(second, "alice") as elsewhere,
    ):
        waiting = await waiting_for_answers(client, key)
        cancelled = await elsewhere.cancel_task(CancelTaskRequest(id=waiting.id))
        answer = {next(iter(asked(waiting))): {"action": "accept", "content": {"sure": True}}}
        with pytest.raises(UnsupportedOperationError) as late:
            [r async for r in client.send_message(answering(waiting, answer))]
        # The run does not wait on: its tool hears the form dismissed.
        await site.reached(f"{key}-cancel")

    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    assert "has ended (cancelled)" in str(late.value)


async def test_the_question_and_answer_on_the_page_are_what_the_door_sends_and_takes(
    doors: tuple[str, str], model_server: ModelServer
) -> None:
    """docs/a2a.md's "A tool that asks": its question is the status message's data part,
    and its answer, sent as it stands, completes the task."""
    section = (DOCS / "a2a.md").read_text(encoding="utf-8").split("### A tool that asks", 1)[1]
    question, answer = (
        json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)[:2]
    )
    first, _ = doors
    model_server.play(calling("ship", "order 42", "Shipped."))
    async with a2a_client(first, "alice") as client:
        waiting = await waiting_for_answers(client, "order 42")
        [response] = [r async for r in client.send_message(answering(waiting, answer["responses"]))]

    assert {"requests": asked(waiting)} == question
    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED, response.task.status
    assert observations(response.task) == ["shipped order 42 for alice"]


async def test_a_replica_going_on_with_a_task_that_waits_for_answers_hands_them_to_the_run(
    site: A2ASite, model_server: ModelServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The replica following a run dies while its tool waits for the caller: the one that
    takes the task over sends the answers (given to it, after) to the run."""
    monkeypatch.setenv("SEAL_KEY", site.environment["SEAL_KEY"])
    keys = seal_keys_of({"seal-keys": ["env:SEAL_KEY"]}, tmp_path, door=DOOR_NAME, url=site.state)
    key = uuid.uuid4().hex
    model_server.play(calling("ship", key, "Shipped after all."))
    async with AsyncExitStack() as stack:
        book = TaskBook(
            await stack.enter_async_context(door_state(site.state, None, keys, door=DOOR_NAME))
        )
        left, left_url = await stack.enter_async_context(site.door())
        _, right_url = await stack.enter_async_context(site.door())
        async with a2a_client(left_url, "alice") as client:
            waiting = await waiting_for_answers(client, key)
        running = await book.get(waiting.id)
        assert running is not None and running.status == "input-required"
        left.process.send_signal(signal.SIGKILL)
        await left.process.wait()
        with anyio.fail_after(60):
            async for now in book.changes(waiting.id):
                if now is not None and now.runner not in (None, running.runner):
                    break
        [(request_key, _)] = asked(waiting).items()
        yes = {request_key: {"action": "accept", "content": {"sure": True}}}
        async with a2a_client(right_url, "alice") as client:
            [response] = [r async for r in client.send_message(answering(waiting, yes))]

    assert response.task.status.state == TaskState.TASK_STATE_COMPLETED, response.task.status
    assert observations(response.task) == [f"shipped {key} for alice"]
