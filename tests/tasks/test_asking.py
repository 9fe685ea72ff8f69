"""A task's tool asks its caller: the questions wait in the task until every one is answered,
from any replica, and only by the task's owner."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.tasks.test_runner import a_task, until
from toolbus.application.tasks import (
    TaskBook,
    TaskEnd,
    TaskInputRelay,
    TaskProgress,
    TaskRunner,
    fitting_answers,
    task_continuation,
)
from toolbus.domain.calls.input_requests import (
    Elicitation,
    ElicitationAnswer,
    InputAsk,
    InputReply,
    Sampling,
    SamplingAnswer,
    request_to_json,
)
from toolbus.domain.errors import TaskClosed, TaskNotAsking, TaskNotFound, UnfitAnswers
from toolbus.memory import state
from toolbus.ports import StateStore

pytestmark = pytest.mark.anyio

SURE = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
ASKED = InputAsk(
    {"sure": Elicitation("Refund 40?", {"type": "object"}), "why": Sampling(["Explain"], 20)},
    "c2VhbGVk",
)


@pytest.fixture
async def store() -> AsyncIterator[StateStore]:
    connected = await state.connect(f"memory://task-asking-{uuid.uuid4().hex}")
    yield connected
    await connected.close()


async def test_the_questions_wait_in_the_task_until_each_is_answered(store: StateStore) -> None:
    book = TaskBook(store)
    got: list[object] = []

    async def work(progress: TaskProgress) -> TaskEnd:
        relay = TaskInputRelay(progress, frozenset({"elicitation", "sampling"}))
        got.append(await relay.answer(ASKED))
        return TaskEnd(result="refunded")

    async with TaskRunner(book, shared=False) as runner:
        task = await runner.start(a_task(), work)
        asked = await until(book, task.id, lambda t: t.status == "input-required")
        with pytest.raises(TaskNotFound):
            await runner.answer("mallory", task.id, {"sure": {"action": "accept"}})
        await runner.answer("alice", task.id, {"sure": {"action": "accept"}, "other": {}})
        half = await book.get(task.id)
        assert half is not None and half.call is not None
        await runner.answer(
            "alice",
            task.id,
            {"why": {"role": "assistant", "content": {"type": "text", "text": "late"}}},
        )
        done = await until(book, task.id, lambda t: t.final)
        with pytest.raises(TaskClosed):
            await runner.answer("alice", task.id, {"why": {}})

    assert asked.input_requests is not None and sorted(asked.input_requests) == ["sure", "why"]
    assert asked.input_requests["sure"]["method"] == "elicitation/create"
    assert half.status == "input-required" and list(half.input_requests or {}) == ["why"]
    assert task_continuation(half) == InputReply(
        {"sure": {"action": "accept"}}, "c2VhbGVk"
    )  # what a replica going on with the task brings
    assert got == [
        {
            "sure": ElicitationAnswer("accept", {}),
            "why": SamplingAnswer("late", "", None, "assistant", {"type": "text", "text": "late"}),
        }
    ]
    assert done.status == "completed" and done.input_requests is None


async def test_a_task_going_on_without_questions_brings_no_answers() -> None:
    assert task_continuation(a_task()) is None


def test_answers_are_checked_against_what_the_task_asks() -> None:
    task = a_task().moved(
        1_800_000_001.0,
        "input-required",
        input_requests={key: request_to_json(request) for key, request in ASKED.requests.items()},
    )
    half = task.answered(1_800_000_002.0, {"sure": {"action": "accept"}})
    elicited = {"action": "accept", "content": {}}
    sampled = {"role": "assistant", "content": {"type": "text", "text": "because"}}

    assert fitting_answers(task, {"sure": elicited}) == {"sure": elicited}
    # Answered already (a request racing this one): left out, not refused.
    assert fitting_answers(half, {"sure": elicited, "why": sampled}) == {"why": sampled}
    with pytest.raises(UnfitAnswers, match=r"responses\['other'\]: task .* does not ask that"):
        fitting_answers(task, {"sure": elicited, "other": {}})
    with pytest.raises(UnfitAnswers, match=r"responses\['why'\]: a sampling answer needs"):
        fitting_answers(task, {"sure": elicited, "why": {"role": "assistant"}})
    form = a_task().moved(
        1_800_000_001.0,
        "input-required",
        input_requests={"sure": request_to_json(Elicitation("Sure?", SURE))},
    )
    with pytest.raises(
        UnfitAnswers, match=r"responses\['sure'\].content: the form requires 'sure'"
    ):
        fitting_answers(form, {"sure": {"action": "accept", "content": {}}})
    assert fitting_answers(form, {"sure": {"action": "decline"}}) == {"sure": {"action": "decline"}}
    with pytest.raises(TaskNotAsking, match="asks nothing now"):
        fitting_answers(a_task(), {"sure": elicited})
    with pytest.raises(TaskClosed):
        fitting_answers(task.moved(1_800_000_003.0, "cancelled"), {"sure": elicited})
