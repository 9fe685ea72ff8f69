"""A task's tool asks its caller: the questions wait in the task, the caller answers there.

Every door that runs calls as tasks relays what their tools ask the same way,
so a door adds a protocol, not a way of waiting:

* make the call inside :func:`~toolbus.application.calls.relaying.relaying`
  with a :class:`TaskInputRelay`, and inside
  :func:`~toolbus.application.calls.relaying.continuing` with
  :func:`task_continuation` of the task when it has one (a replica going on
  with the task brings the answers given so far);
* show the task's :attr:`~toolbus.domain.tasks.Task.input_requests` (the tool's
  requests, as MCP writes them, by key: those not answered yet) while it is
  ``input-required``;
* answer them with :meth:`~toolbus.application.tasks.TaskRunner.answer`,
  from any replica (checked first with :func:`fitting_answers` where the
  caller should hear at once that an answer does not fit); the task stays
  ``input-required`` until every request is answered, then the call goes on
  with the answers.

:class:`~toolbus.application.doors.tasks.CallTasks` takes the first step for
every door's tasks, with the kinds the door recorded in the task (none: the
tool hears at once that its caller cannot be asked). The MCP door's tasks
(``tasks/get``, ``tasks/update``) are one view of the rest; another door's tasks
(an HTTP endpoint answering a task, an A2A task's ``input-required`` state) plug
in with the same steps.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from typing import Any

import anyio

from toolbus.application.tasks.runner import TaskProgress
from toolbus.domain.calls.forms import form_problem
from toolbus.domain.calls.input_requests import (
    Elicitation,
    ElicitationAnswer,
    InputAnswer,
    InputAsk,
    InputKind,
    InputReply,
    InputRequest,
    answer_from_json,
    kinds_of,
    request_from_json,
    request_to_json,
)
from toolbus.domain.errors import TaskClosed, TaskNotAsking, UnfitAnswers, WireError
from toolbus.domain.tasks import Task

log = logging.getLogger("toolbus.tasks")

#: How an answer to a form is written, for messages naming the fix.
FORM_ANSWER = '{"action": "accept", "content": {...}} (or "decline", or "cancel")'


class TaskInputRelay:
    """The input relay of a task's call: what its tool asks waits in the task
    (``input-required``) until its caller has answered every request.

    ``told``, when given, is awaited once the task holds the questions: a door whose
    caller follows the task's events tells it there (an answer before the task holds
    them would be for nothing). ``handed_back``, once set, ends the wait: the call
    ends asking, its questions and state handed back to a caller that answers them
    in place and makes the call again (as a call that asked, so its limits count it
    once).
    """

    def __init__(
        self,
        progress: TaskProgress,
        kinds: frozenset[InputKind],
        handed_back: anyio.Event | None = None,
        *,
        told: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.progress = progress
        self.kinds = kinds
        self.handed_back = handed_back
        self.told = told

    async def answer(self, asked: InputAsk) -> dict[str, InputAnswer] | None:
        requests = {key: request_to_json(request) for key, request in asked.requests.items()}
        await self.progress.asking(requests, asked.state)
        if self.told is not None:
            await self.told()
        return await self.answers_to(asked.requests)

    async def answers_to(
        self, requests: Mapping[str, InputRequest]
    ) -> dict[str, InputAnswer] | None:
        """The caller's answers to ``requests``, which the task holds already, once every
        one is given (a replica going on with a run asked on another one waits here
        too); ``None`` when they are handed back, or the task closed."""
        try:
            given = await self._given(dict(requests))
        except TaskClosed:
            given = None  # cancelled meanwhile (its cancellation is on its way), or gone
        if given is None:
            return None  # handed back, or closed: the call ends asking
        await self.progress.going_on()
        answers: dict[str, InputAnswer] = {}
        for key, request in requests.items():
            with suppress(ValueError):  # an answer that does not fit is asked again
                answers[key] = answer_from_json(request, given[key])
        return answers

    async def _given(self, requests: Mapping[str, Any]) -> dict[str, Any] | None:
        """The caller's answers, or ``None`` once the questions are handed back."""
        handed_back = self.handed_back
        if handed_back is None:
            return await self.progress.answers(requests)
        given: dict[str, Any] | None = None
        async with anyio.create_task_group() as either:

            async def answered() -> None:
                nonlocal given
                given = await self.progress.answers(requests)
                either.cancel_scope.cancel()

            either.start_soon(answered)
            await handed_back.wait()
            either.cancel_scope.cancel()
        return given


def task_kinds(task: Task) -> frozenset[InputKind]:
    """What the task's caller can answer, as its door recorded it."""
    return kinds_of(",".join(task.call.input_kinds)) if task.call is not None else frozenset()


def task_continuation(task: Task) -> InputReply | None:
    """The answers (and state) the task's call goes on with, if its tool asked before."""
    call = task.call
    if call is None or (not call.input_responses and call.input_state is None):
        return None
    return InputReply(call.input_responses, call.input_state)


def fitting_answers(task: Task, responses: Mapping[str, Any]) -> dict[str, Any]:
    """The answers of ``responses`` that ``task`` still waits for, each checked against
    its request (an accepted form's content against the form): :class:`TaskClosed` for a
    task that ended, :class:`TaskNotAsking` for one that asks nothing now,
    :class:`UnfitAnswers` naming the first key it does not ask or whose answer does not
    fit, and the fix (then nothing is to be given). Answers to requests answered already
    (by another request, racing this one) are left out."""
    if task.final:
        raise TaskClosed(task.id, task.status)
    asked = task.input_requests or {}
    if not asked:
        raise TaskNotAsking(task.id, task.status)
    answered = task.call.input_responses if task.call is not None else {}
    keys = ", ".join(map(repr, asked))
    fitting: dict[str, Any] = {}
    for key, given in responses.items():
        if key in asked:
            _check_answer(key, asked[key], given)
            fitting[key] = given
        elif key not in answered:
            raise UnfitAnswers(
                f"responses[{key!r}]: task {task.id[:100]} does not ask that; it asks {keys}"
            )
    return fitting


def _check_answer(key: str, written: Any, given: Any) -> None:
    try:
        request = request_from_json(written)
    except WireError as exc:  # not a request toolbus reads: its answer is the caller's
        log.debug("request %r is not one toolbus reads: %s", key, exc)
        return
    try:
        answer = answer_from_json(request, given)
    except ValueError as exc:
        fix = FORM_ANSWER if isinstance(request, Elicitation) else "the answer as MCP's client"
        raise UnfitAnswers(f"responses[{key!r}]: {exc}; send {fix}") from None
    if isinstance(answer, ElicitationAnswer) and answer.accepted:
        assert isinstance(request, Elicitation)
        problem = form_problem(request.schema, answer.content)
        if problem is not None:
            raise UnfitAnswers(f"responses[{key!r}].content: {problem}")
