"""One agent's A2A operations on toolbus's tasks: :class:`AgentHandler`.

a2a-sdk's transports (JSON-RPC, HTTP+JSON) parse requests, check the
protocol version and call a :class:`~a2a.server.request_handlers.RequestHandler`;
this one answers for an agent service on the bus:

* ``SendMessage`` / ``SendStreamingMessage`` start a task (toolbus's task
  model, door ``a2a``) whose work is the agent's run; a blocking send waits
  until the task ends or waits for input, a stream carries its events; one
  naming a task that waits for its caller's answers (a tool asks,
  :mod:`~toolbus_a2a.serving.asking`) answers it, from any replica;
* ``GetTask``, ``ListTasks``, ``CancelTask`` and ``SubscribeToTask`` read the
  task from the door's (shared) store, so any replica answers them; a stream
  reads the events of a task another replica runs from the bus;
* a task is its owner's: anyone else is told it does not exist;
* push notifications and the extended card are not offered (the card says so).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncGenerator
from contextlib import suppress

from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import RequestHandler
from a2a.types import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskPushNotificationConfig,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    PushNotificationNotSupportedError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.task import (
    HistoryLengthConfig,
    apply_history_length,
    decode_page_token,
    encode_page_token,
    validate_history_length,
    validate_page_size,
)

from toolbus.application.identity.bearer import InsufficientScope, Principal
from toolbus.application.tasks import TaskEnd, TaskProgress, TaskRunner, new_task_id
from toolbus.domain.agent.wire import AgentRequest
from toolbus.domain.errors import TaskClosed, TaskNotFound
from toolbus.domain.tasks import Task as BusTask
from toolbus.domain.tasks import TaskCall, TaskError
from toolbus_a2a.serving.agents import ServedAgent
from toolbus_a2a.serving.asking import read_answers
from toolbus_a2a.serving.messages import read_message
from toolbus_a2a.serving.records import TaskRecord
from toolbus_a2a.serving.runs import RunParts, publish, refuse_task, run_task
from toolbus_a2a.serving.views import (
    TERMINAL,
    a2a_task,
    bus_status,
    message_json,
    status_event,
    waits_for_caller,
)

log = logging.getLogger("toolbus.a2a")

#: The door name of the A2A door's tasks.
TASK_DOOR = "a2a"
#: Tasks a ListTasks page holds unless the caller asks for fewer.
DEFAULT_PAGE = 50
#: Seconds a stream's last event waits at most for the store to hold the task's end.
KEPT_FINAL_WAIT = 10.0


def principal(context: ServerCallContext) -> Principal:
    """Who authenticated the request (the door refuses anonymous ones before the handler)."""
    found = context.state.get("auth")
    if not isinstance(found, Principal):
        raise InvalidRequestError(message="the request is not authenticated")
    return found


def caller(context: ServerCallContext) -> str:
    """The toolbus user behind the request."""
    return principal(context).user


def _beyond_scopes(who: Principal, groups: list[str] | None) -> TaskError | None:
    """Why the token's scopes do not reach ``groups`` (the task is rejected), or ``None``."""
    try:
        who.within(groups)
    except InsufficientScope as failure:
        return TaskError(type="insufficient-scope", message=failure.message)
    return None


class AgentHandler(RequestHandler):
    """A2A operations for ``agent``; see the module docs.

    Args:
        agent: the agent service on the bus.
        card: its Agent Card.
        parts: what its tasks' runs use (its client on the bus, the book, the events).
        runner: runs the door's tasks.
    """

    def __init__(
        self, agent: ServedAgent, card: AgentCard, parts: RunParts, runner: TaskRunner
    ) -> None:
        self.agent = agent
        self.card = card
        self.parts = parts
        self.runner = runner

    # ------------------------------------------------------------------ tasks

    async def _owned(self, user: str, task_id: str) -> tuple[BusTask, TaskRecord]:
        try:
            task = await self.parts.book.owned(user, task_id)
        except TaskNotFound:
            raise TaskNotFoundError from None
        record = await self.parts.records.task(task_id)
        if task.door != TASK_DOOR or record is None or record.agent != self.agent.name:
            raise TaskNotFoundError
        return task, record

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        validate_history_length(params)
        task, record = await self._owned(caller(context), params.id)
        return apply_history_length(a2a_task(task, record), params)

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        validate_history_length(params)
        size = params.page_size if params.HasField("page_size") else DEFAULT_PAGE
        validate_page_size(size)
        wanted = bus_status(params.status) if params.status else None
        if params.status and wanted is None:
            # Tasks are never submitted or waiting for authorization here.
            return ListTasksResponse(page_size=size)
        after = params.status_timestamp_after.ToNanoseconds() / 1e9
        found = []
        for task in await self.parts.book.of_owner(caller(context)):
            if task.door != TASK_DOOR or (wanted is not None and task.status != wanted):
                continue
            if params.HasField("status_timestamp_after") and task.updated_at < after:
                continue
            record = await self.parts.records.task(task.id)
            if record is None or record.agent != self.agent.name:
                continue
            if params.context_id and record.context_id != params.context_id:
                continue
            found.append((task, record))
        found.sort(key=lambda pair: (pair[0].updated_at, pair[0].id), reverse=True)
        start = 0
        if params.page_token:
            cursor = decode_page_token(params.page_token)
            ids = [task.id for task, _ in found]
            if cursor not in ids:
                raise InvalidParamsError(
                    message="pageToken does not name a page of this list; start again without it"
                )
            start = ids.index(cursor) + 1
        page = found[start : start + size]
        more = start + size < len(found)
        response = ListTasksResponse(
            page_size=size,
            total_size=len(found),
            next_page_token=encode_page_token(page[-1][0].id) if more and page else "",
        )
        for task, record in page:
            shown = apply_history_length(a2a_task(task, record), params)
            if not params.include_artifacts:
                shown.ClearField("artifacts")
            response.tasks.append(shown)
        return response

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        user = caller(context)
        task, record = await self._owned(user, params.id)
        if task.final:
            raise TaskNotCancelableError(
                message=f"task {task.id} has ended ({task.status}); only a running task is "
                "cancelled"
            )
        try:
            cancelled = await self.runner.cancel(user, task.id)
        except TaskClosed:
            raise TaskNotCancelableError(
                message=f"task {task.id} has ended; only a running task is cancelled"
            ) from None
        except TaskNotFound:
            raise TaskNotFoundError from None
        # Every replica's streams of the task end with it (this one's too: it hears the bus).
        await publish(self.parts.events, task.id, status_event(cancelled, record))
        return a2a_task(cancelled, record)

    # ------------------------------------------------------------------ messages

    async def _start(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[BusTask, TaskRecord]:
        who = principal(context)
        user = who.user
        validate_history_length(params.configuration)
        if params.configuration.HasField("task_push_notification_config"):
            raise PushNotificationNotSupportedError(
                message="this agent sends no push notifications; follow the task with "
                "SubscribeToTask or GetTask"
            )
        message = params.message
        question = read_message(params)
        context_id = message.context_id or uuid.uuid4().hex
        conversation = await self.parts.records.context(user, context_id, self.agent.name)
        request_id = str(uuid.uuid4())
        request = AgentRequest(
            question=question.text,
            user=user,
            group=question.groups,
            state=question.state,
            streaming=True,
            session=conversation.session,
            messages=None if conversation.session else (list(conversation.messages) or None),
        )
        now = time.time()
        task_id = new_task_id()
        sent = Message()
        sent.CopyFrom(message)
        sent.task_id, sent.context_id = task_id, context_id
        record = TaskRecord(
            task_id=task_id,
            context_id=context_id,
            agent=self.agent.name,
            request_id=request_id,
            history=[message_json(sent)],
        )
        task = BusTask(
            id=task_id,
            owner=user,
            tool=self.agent.name,
            door=TASK_DOOR,
            created_at=now,
            updated_at=now,
            ttl=self.parts.ttl,
            call=TaskCall(
                groups=tuple(question.groups) if question.groups is not None else ("default",),
                state=question.state,
                request_id=request_id,
                tool_call_id=message.message_id or request_id,
                arguments={"question": question.text},
                session=conversation.session,
            ),
        )
        # Kept as long as the task may be: running (a run takes at most the timeout), then ttl.
        await self.parts.records.keep_task(record, ttl=self.parts.ttl + self.parts.timeout)

        refusal = _beyond_scopes(who, question.groups)

        async def work(progress: TaskProgress) -> TaskEnd:
            if refusal is not None:
                return await refuse_task(self.parts, record, progress, refusal)
            return await run_task(
                self.parts, record, progress, request, conversation, question.text, user
            )

        started = await self.runner.start(task, work)
        return started, record

    async def _answer(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[BusTask, TaskRecord]:
        """A message naming a task: the answers to what its tool asks; a task waiting for
        nothing else of its caller takes no message (see docs/a2a.md)."""
        user = caller(context)
        validate_history_length(params.configuration)
        message = params.message
        task, record = await self._owned(user, message.task_id)
        if message.context_id and message.context_id != record.context_id:
            raise InvalidParamsError(
                message=f"contextId {message.context_id} is not the context of task "
                f"{task.id}; leave it out, or send {record.context_id}"
            )
        if task.final:
            raise UnsupportedOperationError(
                message=f"task {task.id} has ended ({task.status}); send the message without "
                f"taskId (with contextId {record.context_id} to go on with the conversation)"
            )
        if task.input_requests:
            answers = read_answers(message, task)
            try:
                answered = await self.runner.answer(user, task.id, answers)
            except TaskNotFound:
                raise TaskNotFoundError from None
            except TaskClosed:
                raise UnsupportedOperationError(
                    message=f"task {task.id} ended before the answer came; send the message "
                    f"again without taskId (with contextId {record.context_id})"
                ) from None
            sent = Message()
            sent.CopyFrom(message)
            sent.context_id = record.context_id
            try:
                await self.parts.records.said(
                    task.id, message_json(sent), ttl=self.parts.ttl + self.parts.timeout
                )
            except Exception as exc:  # the answer stands; only the history misses it
                log.warning("task %s: an answer could not be kept: %s", task.id, exc)
            return answered, await self.parts.records.task(task.id) or record
        if task.status == "input-required":
            raise UnsupportedOperationError(
                message=f"task {task.id} is {task.message or 'waiting for input'}: a person "
                "decides that approval (toolbus approvals approve, or the gateway's "
                "/v1/approvals); the task goes on by itself, follow it with SubscribeToTask"
            )
        raise UnsupportedOperationError(
            message=f"task {task.id} is still working and takes no further input; follow it "
            "with SubscribeToTask, or cancel it"
        )

    async def _sent(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> tuple[BusTask, TaskRecord]:
        """A message sent: a new task, or answers to one (it names the task)."""
        if params.message.task_id:
            return await self._answer(params, context)
        return await self._start(params, context)

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        started, record = await self._sent(params, context)
        task = started
        if not params.configuration.return_immediately:
            async for seen in self.parts.book.changes(started.id):
                if seen is None:
                    break
                task = seen
                if task.final or waits_for_caller(task):
                    break
            # With the steps the run kept in its history meanwhile.
            record = await self.parts.records.task(task.id) or record
        return apply_history_length(a2a_task(task, record), params.configuration)

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        started, record = await self._sent(params, context)
        async for event in self._stream(started, record, params.configuration):
            yield event

    async def _stream(
        self, task: BusTask, record: TaskRecord, history: HistoryLengthConfig | None
    ) -> AsyncGenerator[Event, None]:
        with self.parts.events.listen(task.id) as events:
            # The task as it is now (read once listening: nothing after it is missed),
            # then what happens to it.
            current = await self.parts.book.get(task.id) or task
            yield apply_history_length(a2a_task(current, record), history)
            if current.final:
                return
            async for versioned in events:
                event = versioned.event
                if isinstance(event, TaskStatusUpdateEvent) and event.status.state in TERMINAL:
                    await self._kept_final(task.id)
                    yield event
                    return
                yield event

    async def _kept_final(self, task_id: str) -> None:
        """Until the store holds the task's end: its run announces the end before its runner
        keeps it, and a caller told that the task ended must read it ended (from any
        replica). Bounded: a store that cannot be written does not hold the stream."""
        with suppress(TaskNotFound):  # gone meanwhile (expired): nothing more to wait for
            await self.parts.book.final(task_id, timeout=KEPT_FINAL_WAIT)

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        task, record = await self._owned(caller(context), params.id)
        if task.final:
            raise UnsupportedOperationError(
                message=f"task {task.id} has ended ({task.status}); read it with GetTask"
            )
        async for event in self._stream(task, record, None):
            yield event

    # ------------------------------------------------------------------ not offered

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        raise PushNotificationNotSupportedError

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        raise PushNotificationNotSupportedError

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        raise PushNotificationNotSupportedError

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        raise UnsupportedOperationError(
            message="this agent has no extended card: its public card says everything"
        )
