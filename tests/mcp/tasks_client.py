"""An MCP client of the tasks extension, for the tests: the SDK's client, told to declare
the extension, and the extension's requests (the SDK has no client for them)."""

from __future__ import annotations

from typing import Any, Literal

import anyio
import mcp_types
from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from pydantic import ConfigDict, Field, TypeAdapter

TASKS = "io.modelcontextprotocol/tasks"
_ANY: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class TaskRef(mcp_types.RequestParams):
    task_id: str = Field(alias="taskId")


class TaskAnswers(TaskRef):
    input_responses: dict[str, Any] = Field(alias="inputResponses")


class GetTask(mcp_types.Request[TaskRef, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class CancelTask(mcp_types.Request[TaskRef, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    name_param = "taskId"


class UpdateTask(mcp_types.Request[TaskAnswers, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class CreatedTask(mcp_types.Result):
    """A ``CreateTaskResult``, as the client's claim reads it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


async def task_get(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(GetTask(params=TaskRef(taskId=task_id)), _ANY)


async def task_cancel(client: Client, task_id: str) -> dict[str, Any]:
    return await client.session.send_request(CancelTask(params=TaskRef(taskId=task_id)), _ANY)


async def task_update(client: Client, task_id: str, answers: dict[str, Any]) -> dict[str, Any]:
    request = UpdateTask(params=TaskAnswers(taskId=task_id, inputResponses=answers))
    return await client.session.send_request(request, _ANY)


async def call_raw(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """``tools/call``'s result as it came (a task or a result)."""
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=name, arguments=arguments)
    )
    return await client.session.send_request(request, _ANY)


async def until_final(client: Client, task_id: str, seconds: float = 20) -> dict[str, Any]:
    """Poll the task until it ended, as a client does (at its poll interval, shortened)."""
    with anyio.fail_after(seconds):
        while True:
            task = await task_get(client, task_id)
            if task["status"] in ("completed", "failed", "cancelled"):
                return task
            await anyio.sleep(0.05)


class TasksExtension(ClientExtension):
    """Declares the extension; a ``tools/call`` that becomes a task is polled to its end."""

    identifier = TASKS

    def __init__(self) -> None:
        self.created: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=self._resolve)]

    async def _resolve(
        self, created: CreatedTask, context: ClaimContext
    ) -> mcp_types.CallToolResult:
        self.created.append(created.task_id)
        with anyio.fail_after(30):
            while True:
                request = GetTask(params=TaskRef(taskId=created.task_id))
                task = await context.session.send_request(request, _ANY)
                if task["status"] == "completed":
                    return mcp_types.CallToolResult.model_validate(task["result"])
                if task["status"] in ("failed", "cancelled"):
                    raise AssertionError(f"the task ended {task['status']}: {task}")
                await anyio.sleep(0.05)
