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
  from any replica; the task stays ``input-required`` until every request is
  answered, then the call goes on with the answers.

:class:`~toolbus.application.doors.tasks.CallTasks` takes the first step for
every door's tasks, with the kinds the door recorded in the task (none: the
tool hears at once that its caller cannot be asked). The MCP door's tasks
(``tasks/get``, ``tasks/update``) are one view of the rest; another door's tasks
(an HTTP endpoint answering a task, an A2A task's ``input-required`` state) plug
in with the same steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress

from toolbus.application.tasks.runner import TaskProgress
from toolbus.domain.calls.input_requests import (
    InputAnswer,
    InputAsk,
    InputKind,
    InputReply,
    answer_from_json,
    kinds_of,
    request_to_json,
)
from toolbus.domain.tasks import Task


class TaskInputRelay:
    """The input relay of a task's call: what its tool asks waits in the task
    (``input-required``) until its caller has answered every request.

    ``told``, when given, is awaited once the task holds the questions: a door whose
    caller follows the task's events tells it there (an answer before the task holds
    them would be for nothing).
    """

    def __init__(
        self,
        progress: TaskProgress,
        kinds: frozenset[InputKind],
        *,
        told: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.progress = progress
        self.kinds = kinds
        self.told = told

    async def answer(self, asked: InputAsk) -> dict[str, InputAnswer]:
        requests = {key: request_to_json(request) for key, request in asked.requests.items()}
        await self.progress.asking(requests, asked.state)
        if self.told is not None:
            await self.told()
        given = await self.progress.answers(requests)
        await self.progress.going_on()
        answers: dict[str, InputAnswer] = {}
        for key, request in asked.requests.items():
            with suppress(ValueError):  # an answer that does not fit is asked again
                answers[key] = answer_from_json(request, given[key])
        return answers


def task_kinds(task: Task) -> frozenset[InputKind]:
    """What the task's caller can answer, as its door recorded it."""
    return kinds_of(",".join(task.call.input_kinds)) if task.call is not None else frozenset()


def task_continuation(task: Task) -> InputReply | None:
    """The answers (and state) the task's call goes on with, if its tool asked before."""
    call = task.call
    if call is None or (not call.input_responses and call.input_state is None):
        return None
    return InputReply(call.input_responses, call.input_state)
