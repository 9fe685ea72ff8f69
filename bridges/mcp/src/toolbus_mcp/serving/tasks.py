"""MCP Tasks: the ``io.modelcontextprotocol/tasks`` extension over the door's tasks.

A client that declares the extension (2026-07-28, in its request's
capabilities) may get a *task* instead of a result for a ``tools/call``: a
``CreateTaskResult`` (``resultType: "task"``) whose ``taskId`` it polls with
``tasks/get`` until the task ends, the tool's result inlined then. The server
decides, per tool (its ``task-support``, MCP's ``execution.taskSupport``):

* ``forbidden``: never; the call answers in place;
* ``required``: always; a client that did not declare the extension is refused
  with ``-32021`` (missing required client capability);
* ``optional`` (the default): the call answers in place when it ends within
  ``task_after`` seconds, and becomes a task the client polls otherwise. A
  tool that asks its caller for input within that time is answered in place
  too: the ``tools/call`` answers an ``input_required`` result, and the call
  made again with the answers starts over (and may become a task then).

Tasks are the door's calls as tasks (:class:`~toolbus.application.doors.tasks.CallTasks`,
as at every door), kept in the door's state store: any replica sharing it
answers ``tasks/get``, ``tasks/update`` and ``tasks/cancel`` for any task, and
goes on with those a stopped replica left.
Only a task's owner (the user it was made for) sees it; another's task, or
none, is ``-32602``, the same answer either way.

A task waiting for an approval its caller may give shows ``input_required``
with the approval form as its ``inputRequests``; the client answers it with
``tasks/update``. So does a task whose tool asks its caller (elicitation,
sampling, roots): its ``inputRequests`` are the tool's, and it stays
``input_required`` until every one is answered, showing those still open.
Waiting for other approvers, a task is ``working``, its ``statusMessage``
saying for whom. A tool's error answer is a ``completed``
task with ``isError: true``, as the call's result would be; ``failed`` (with a
JSON-RPC error) is kept for calls the door itself could not make.
``tasks/result`` and ``tasks/list``, which the extension removed, are answered
as unknown methods (``-32601``). A ``subscriptions/listen`` stream that names
``taskIds`` is sent ``notifications/tasks`` as the caller's tasks among them change
(:mod:`toolbus_mcp.serving.task_notifications`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import suppress
from datetime import UTC, datetime
from typing import Any

import mcp_types as mcp
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from pydantic import Field, ValidationError

from toolbus.application.agent.outcomes import CallOutcome
from toolbus.application.agent.session import AgentSession
from toolbus.application.doors.holding import HeldKey
from toolbus.application.doors.keeping import WORKFLOW
from toolbus.application.doors.tasks import CallTasks, call_task, task_end
from toolbus.application.tasks import TaskEnd, TaskProgress, new_task_id
from toolbus.domain.calls.input_requests import (
    InputKind,
    InputReply,
    answer_from_json,
    request_from_json,
)
from toolbus.domain.errors import (
    AccessDenied,
    ApprovalClosed,
    NotAnApprover,
    TaskClosed,
    TaskNotFound,
    UnknownTool,
)
from toolbus.domain.tasks import Task, TaskError
from toolbus_mcp.serving.approvals import VIA, answer_of, can_ask, form
from toolbus_mcp.serving.asking import INPUT_STATE_PREFIX
from toolbus_mcp.serving.progress import call_reporting
from toolbus_mcp.serving.server import BusMcpServer, Workflow
from toolbus_mcp.serving.task_notifications import Listen, follow_tasks

log = logging.getLogger("toolbus.mcp")

#: The extension's identifier, in capabilities.
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: The door's name in the tasks it makes.
DOOR = "mcp"
#: Seconds an ``optional`` tool's call answers in place before it becomes a task.
DEFAULT_TASK_AFTER = 0.5
#: How often clients are asked to poll a task, in milliseconds.
POLL_INTERVAL_MS = 1000
#: The error type of a call the door could not make (the task runner's): ``failed``.
DOOR_FAILURE = "internal-error"
#: The prefix of an approval's key in a task's ``inputRequests``.
APPROVAL_KEY = "approval-"


class TaskParams(mcp.RequestParams):
    """``tasks/get`` and ``tasks/cancel``: the task."""

    task_id: str = Field(alias="taskId", max_length=200)


class UpdateTaskParams(TaskParams):
    """``tasks/update``: answers to the task's input requests, by key."""

    input_responses: dict[str, Any] = Field(alias="inputResponses", default_factory=dict)


def missing_extension(what: str) -> MCPError:
    """``-32021``: ``what`` needs the client to declare the tasks extension."""
    return MCPError(
        mcp.MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} needs the {TASKS_EXTENSION} extension: declare it in the request's "
        "client capabilities (capabilities.extensions)",
        data={"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def declared(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the request's client declared the tasks extension (2026-07-28 and later)."""
    if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
        return False
    wanted = mcp.ClientCapabilities(extensions={TASKS_EXTENSION: {}})
    return bool(ctx.session.check_client_capability(wanted))


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


class McpTasks:
    """The tasks extension of one :class:`~toolbus_mcp.serving.server.BusMcpServer`.

    Args:
        server: the MCP server whose ``tools/call`` makes tasks.
        calls: the door's calls as tasks, over the runner that runs them (entered by
            whoever runs the server: :func:`~toolbus_mcp.serving.running.door_tasks`).
        task_after: seconds an ``optional`` tool's call answers in place before it
            becomes a task (0: at once).
    """

    def __init__(
        self,
        server: BusMcpServer,
        calls: CallTasks,
        *,
        task_after: float = DEFAULT_TASK_AFTER,
    ) -> None:
        self.server = server
        self.calls = calls
        self.runner = runner = calls.runner
        self.book = runner.book
        self.task_after = task_after
        low = server.server
        low.extensions[TASKS_EXTENSION] = {}
        # Tasks are kept in the door's store: while it is away, these say when to try again.
        needed = server.store_needed
        low.add_request_handler("tasks/get", TaskParams, needed(self._get))
        low.add_request_handler("tasks/update", UpdateTaskParams, needed(self._update))
        low.add_request_handler("tasks/cancel", TaskParams, needed(self._cancel))
        runner.resumes(DOOR, self._run)
        server.tasks = self

    # ------------------------------------------------------------- tools/call

    def wanted(self, ctx: ServerRequestContext[Any, Any], session: AgentSession, name: str) -> bool:
        """Whether this call becomes a task; ``-32021`` for a tool whose calls must, from a
        client that did not declare the extension."""
        registry = session.registry
        if not registry.is_available(name, session.groups, session.state):
            return False  # refused in place, saying no more than "not available"
        try:
            support = registry.tool(name).task_support
        except UnknownTool:
            return False
        if support == "forbidden":
            return False
        if declared(ctx):
            return True
        if support == "required":
            raise missing_extension(f"tool {name!r} runs its calls as tasks only: it")
        return False

    async def start(
        self,
        workflow: Workflow,
        session: AgentSession,
        name: str,
        arguments: Mapping[str, Any],
        kinds: frozenset[InputKind] = frozenset(),
        given: InputReply | None = None,
    ) -> mcp.CallToolResult | dict[str, Any]:
        """Make the call a task: its result when it ends in time (an ``optional`` tool),
        or the ``input_required`` result when its tool asks its caller in that time;
        else the ``CreateTaskResult``. ``kinds`` are what the client can answer, ``given``
        the answers (and state) it brings to what the tool asked before."""
        task_id = new_task_id()
        task = call_task(
            door=DOOR,
            owner=session.user,
            tool=name,
            groups=session.groups,
            state=session.state,
            request_id=session.request_id,
            arguments=arguments,
            # Its own id: the approval it may wait for is found again by it.
            tool_call_id=task_id,
            session=workflow.key.id,
            ttl=self.calls.settings.ttl,
            now=self.book.clock(),
            task_id=task_id,
            input_kinds=kinds,
            given=given,
        )

        async def work(progress: TaskProgress) -> TaskEnd:
            return await self._run(task, progress)

        kept = await self.runner.start(task, work)
        if session.registry.tool(name).task_support == "optional" and self.task_after > 0:
            ended = await self._settled(task_id)
            if ended is not None and ended.input_requests:
                # Asked in time: the client answers in place, and calls again.
                await self._hand_back(ended)
                return _input_required(ended)
            if ended is not None and ended.status != "cancelled":
                detailed = await self.detailed(ended, None)
                if detailed["status"] == "failed":
                    raise MCPError.from_error_data(mcp.ErrorData.model_validate(detailed["error"]))
                return mcp.CallToolResult.model_validate(detailed["result"])
        created = _envelope(kept)
        created["resultType"] = "task"
        return created

    async def _hand_back(self, task: Task) -> None:
        """The questions of ``task``'s tool go to the client, who calls again with the
        answers: the task's call ends asking (so its limits count the call once: it comes
        back as the call that asked), and the task, which the client never saw, is
        cancelled. A call another replica makes is cancelled at once."""
        if self.calls.hand_back(task.id):
            # Its end (the call's limits noting its state) comes before the client's
            # next call can: the work cancels its task once the call ended asking.
            await self.book.first(
                task.id, lambda task: task.final, self.calls.settings.call_timeout
            )
            return
        with suppress(TaskClosed, TaskNotFound):
            await self.runner.cancel(task.owner, task.id)

    async def _settled(self, task_id: str) -> Task | None:
        """The task once it ended or its tool asked, within ``task_after``; else ``None``."""
        return await self.book.first(
            task_id, lambda task: task.final or bool(task.input_requests), self.task_after
        )

    async def _run(self, task: Task, progress: TaskProgress) -> TaskEnd:
        """Make the task's call, on this replica or on one going on with it."""
        call = task.call
        if call is None or call.session is None:
            return _failure("the task holds no call to make")
        door = self.server.door
        key = HeldKey(task.owner, WORKFLOW, call.session)
        held = await door.holder.get(key)
        if held is None:
            return TaskEnd(
                error=TaskError(
                    type="unavailable",
                    message="the workflow the call was made in ended before it ran; make it again",
                )
            )
        try:
            # A session of its own: the workflow's other requests go on meanwhile, and
            # what each reached is merged when it is kept. Going on with a call whose
            # approval was given and spent, it is sent again, not asked for anew.
            session, approval_id = await self.calls.resumed(task, held.session)
        except AccessDenied as exc:
            return TaskEnd(error=TaskError(type=exc.error_type, message=str(exc)))

        async def streamed(
            session: AgentSession, name: str, arguments: Mapping[str, Any], tool_call_id: str | None
        ) -> CallOutcome:
            async def chunk(count: int, text: str) -> None:
                await progress.chunk()

            return await call_reporting(session, name, arguments, chunk, tool_call_id=tool_call_id)

        # What the tool asks waits in the task (CallTasks relays it), for tasks/update.
        outcome = await self.calls.call(
            task, session, progress, approval_id=approval_id, make=streamed
        )
        await door.held.keep(held, session)
        if outcome.asked is not None:
            # Its questions were handed back to the client, who answers them in place: the
            # task it never saw ends cancelled, not failed.
            with suppress(TaskClosed, TaskNotFound):
                await self.runner.cancel(task.owner, task.id)
        if outcome.transition is not None:
            await self.server.notify_moved(key)
        return task_end(outcome)

    # ------------------------------------------------------------- tasks/*

    async def _owned(self, ctx: ServerRequestContext[Any, Any], task_id: str) -> Task:
        if not declared(ctx):
            raise missing_extension(ctx.method)
        headers = getattr(ctx.request, "headers", None)
        if headers is not None and decode_header_value(headers.get(MCP_NAME_HEADER)) != task_id:
            # Load balancers route on Mcp-Name: a request it misnames must not be served.
            raise MCPError(
                mcp.HEADER_MISMATCH,
                "the Mcp-Name header does not match the request body's 'taskId' parameter",
            )
        owner = self.server.caller_of(ctx).user
        try:
            return await self.book.owned(owner, task_id)
        except TaskNotFound:
            raise MCPError(
                mcp.INVALID_PARAMS,
                f"Failed to retrieve task: no task {task_id[:100]!r} for you (it may have "
                "ended long enough ago to be dropped)",
            ) from None

    async def _get(self, ctx: ServerRequestContext[Any, Any], params: TaskParams) -> dict[str, Any]:
        task = await self._owned(ctx, params.task_id)
        return await self.detailed(task, ctx)

    async def _update(
        self, ctx: ServerRequestContext[Any, Any], params: UpdateTaskParams
    ) -> dict[str, Any]:
        task = await self._owned(ctx, params.task_id)
        if task.status == "input-required" and task.input_requests:
            await self._answer(task, params.input_responses)
            return {}
        approvals = self.server.door.book
        if task.status != "input-required" or task.approval_id is None or approvals is None:
            return {}  # nothing is outstanding: answers to keys not asked are ignored
        given = params.input_responses.get(APPROVAL_KEY + task.approval_id)
        if not isinstance(given, Mapping):
            return {}
        try:
            answer = answer_of(mcp.ElicitResult.model_validate(given))
        except ValidationError:
            raise MCPError(
                mcp.INVALID_PARAMS,
                f"inputResponses[{APPROVAL_KEY + task.approval_id!r}] is not an elicitation "
                "result: send {'action': 'accept', 'content': {'approve': true}} (or 'decline')",
            ) from None
        if answer is not None:
            # Decided meanwhile, or the caller may not: the task shows what holds.
            with suppress(ApprovalClosed, NotAnApprover):
                await approvals.decide(
                    task.approval_id, task.owner, answer.approve, answer.note, via=VIA
                )
        return {}

    async def _answer(self, task: Task, responses: Mapping[str, Any]) -> None:
        """Answers to what the task's tool asks: each must fit its request (``-32602``)."""
        pending = task.input_requests or {}
        given = {key: value for key, value in responses.items() if key in pending}
        for key, value in given.items():
            try:
                answer_from_json(request_from_json(pending[key]), value)
            except ValueError as exc:
                raise MCPError(
                    mcp.INVALID_PARAMS,
                    f"inputResponses[{key[:100]!r}] does not answer its request: {exc}",
                ) from None
        with suppress(TaskClosed):  # ended meanwhile: the task shows what holds
            await self.runner.answer(task.owner, task.id, given)

    async def _cancel(
        self, ctx: ServerRequestContext[Any, Any], params: TaskParams
    ) -> dict[str, Any]:
        task = await self._owned(ctx, params.task_id)
        with suppress(TaskClosed):  # ended already: acknowledged all the same
            await self.runner.cancel(task.owner, task.id)
        return {}

    # ------------------------------------------------------------- notifications

    async def listen(
        self,
        ctx: ServerRequestContext[Any, Any],
        params: mcp.SubscriptionsListenRequestParams,
        inner: Listen,
    ) -> mcp.SubscriptionsListenResult:
        """``subscriptions/listen``: the stream ``inner`` serves, and ``notifications/tasks``
        for the caller's tasks among the ``taskIds`` asked for, at each change of theirs."""
        wanted = (params.notifications.model_extra or {}).get("taskIds")
        if wanted is None:
            return await inner(ctx, params)
        if not declared(ctx):
            raise missing_extension("task status notifications (taskIds)")
        owner = self.server.caller_of(ctx).user
        return await follow_tasks(ctx, params, inner, wanted, self.book, owner, self.detailed)

    # ------------------------------------------------------------- views

    async def detailed(
        self, task: Task, ctx: ServerRequestContext[Any, Any] | None
    ) -> dict[str, Any]:
        """The task as ``tasks/get`` shows it (MCP's ``DetailedTask``)."""
        shown = _envelope(task)
        if task.status == "input-required":
            requests = await self._input_requests(task, ctx)
            if requests:
                shown.update(status="input_required", inputRequests=requests)
            else:
                shown["status"] = "working"  # waiting for someone the client cannot ask
        elif task.status == "completed":
            shown["result"] = _result(task.result or "", is_error=False)
        elif task.status == "failed":
            error = task.error or TaskError(type=DOOR_FAILURE, message="the call failed")
            if error.type == DOOR_FAILURE:
                shown["error"] = {"code": mcp.INTERNAL_ERROR, "message": error.message}
                shown["statusMessage"] = error.message
            else:  # the tool's error answer, or a refusal: the result the call would have had
                shown.update(status="completed", result=_result(error.message, is_error=True))
        return shown

    async def _input_requests(
        self, task: Task, ctx: ServerRequestContext[Any, Any] | None
    ) -> dict[str, Any]:
        if task.input_requests:  # what the tool asks, still open
            return dict(task.input_requests)
        approvals = self.server.door.book
        if task.approval_id is None or approvals is None or ctx is None or not can_ask(ctx):
            return {}
        approval = await approvals.get(task.approval_id)
        if approval is None or approval.status != "pending":
            return {}
        if approval.expires_at <= time.time() or not approval.may_decide(task.owner):
            return {}
        request = mcp.ElicitRequest(method="elicitation/create", params=form(approval))
        return {
            APPROVAL_KEY + approval.id: request.model_dump(
                mode="json", by_alias=True, exclude_none=True
            )
        }


def _input_required(task: Task) -> dict[str, Any]:
    """The ``input_required`` result of a call whose tool asked before it became a task."""
    result: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": dict(task.input_requests or {}),
    }
    state = task.call.input_state if task.call is not None else None
    if state is not None:
        result["requestState"] = INPUT_STATE_PREFIX + state
    return result


def _envelope(task: Task) -> dict[str, Any]:
    """What every shape of a task carries (MCP's ``Task``)."""
    status = {"input-required": "input_required"}.get(task.status, task.status)
    shown: dict[str, Any] = {
        "taskId": task.id,
        "status": status,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.updated_at),
        # Kept while it runs; once it ended, ttl seconds more.
        "ttlMs": int((task.updated_at + task.ttl - task.created_at) * 1000) if task.final else None,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    if task.message:
        shown["statusMessage"] = task.message
    return shown


def _result(text: str, *, is_error: bool) -> dict[str, Any]:
    return mcp.CallToolResult(content=[mcp.TextContent(text=text)], is_error=is_error).model_dump(
        mode="json", by_alias=True, exclude_none=True
    )


def _failure(message: str) -> TaskEnd:
    return TaskEnd(error=TaskError(type=DOOR_FAILURE, message=message))
