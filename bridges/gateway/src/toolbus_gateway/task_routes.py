"""``/v1/tasks``: calls that run as tasks, read and cancelled by their owner.

A call becomes a task when its caller asks (``Prefer: respond-async``), when
its tool requires it (``task-support = "required"``), or when it waits for a
person longer than ``approval-wait`` (``[tasks]``); its answer is then ``202
Accepted`` with ``Location: /v1/tasks/{id}``. A task belongs to the user whose
call it is: to anyone else its id does not exist (404, as an unknown one),
except to operators (the console's users), who may read and cancel any. A
task whose tool asks its caller (who said it can answer: ``can_answer``) is
``input-required`` with its ``input_requests``; its owner answers them at
``POST /v1/tasks/{id}/input``.
Any replica answers for any task: they are kept in the gateway's store (while it
is away, ``503`` at once).
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, Request

from toolbus_gateway.call_answers import tasks_of
from toolbus_gateway.health import store_needed
from toolbus_gateway.http_auth import gateway_of
from toolbus_gateway.models import TaskInput, TaskList, TaskView
from toolbus_gateway.routing import v1_router
from toolbus_gateway.tool_routes import CallerDep

router = v1_router([Depends(store_needed)])

_ONE: dict[int | str, dict[str, Any]] = {404: {"description": "No such task for the caller"}}


def _view(task: Any) -> TaskView:
    return TaskView.model_validate(task.view())


@router.get("/tasks", response_model=TaskList, summary="The caller's tasks")
async def list_tasks(request: Request, caller: CallerDep) -> TaskList:
    """The caller's own tasks still kept (running, and ended within their ``ttl``), newest
    first."""
    tasks = tasks_of(gateway_of(request))
    return TaskList(tasks=[_view(task) for task in await tasks.book.of_owner(caller.user)])


@router.get("/tasks/{task_id}", response_model=TaskView, summary="One task", responses=_ONE)
async def get_task(request: Request, caller: CallerDep, task_id: str) -> TaskView:
    """A task of the caller's (an operator's: any task): its status, and in the end its
    result or error."""
    gateway = gateway_of(request)
    tasks = tasks_of(gateway)
    return _view(
        await tasks.visible(caller.user, task_id, operator=gateway.is_operator(caller.user))
    )


@router.post(
    "/tasks/{task_id}/input",
    response_model=TaskView,
    summary="Answer what a task's tool asks",
    responses=_ONE,
)
async def answer_task(
    request: Request, caller: CallerDep, task_id: str, body: TaskInput
) -> TaskView:
    """Answer the questions of a task of the caller's, by the keys of its ``input_requests``.
    Every answer is checked first: one that does not fit is refused (422) and none is given.
    The task stays ``input-required`` until every question is answered, then its call goes
    on with the answers, on whichever replica makes it."""
    tasks = tasks_of(gateway_of(request))
    return _view(await tasks.answer(caller.user, task_id, body.responses))


@router.delete(
    "/tasks/{task_id}",
    response_model=TaskView,
    summary="Cancel a task",
    responses={**_ONE, 409: {"description": "The task has ended already"}},
)
async def cancel_task(request: Request, caller: CallerDep, task_id: str) -> TaskView:
    """Cancel a task of the caller's (an operator's: any task): its call is stopped on
    whichever replica makes it, and the approval it waits for is withdrawn."""
    gateway = gateway_of(request)
    tasks = tasks_of(gateway)
    return _view(
        await tasks.cancel(caller.user, task_id, operator=gateway.is_operator(caller.user))
    )
