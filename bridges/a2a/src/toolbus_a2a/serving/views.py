"""toolbus's tasks as A2A shows them: :func:`a2a_task`.

An A2A task is a view of toolbus's task (docs/tasks.md) and the door's record
of it (:class:`~toolbus_a2a.serving.records.TaskRecord`):

=======================  ==============================================
toolbus                  A2A
=======================  ==============================================
``working``              ``TASK_STATE_WORKING``
``input-required``       ``TASK_STATE_INPUT_REQUIRED``; its message says for whom, or
                         carries what the tool asks (:mod:`~toolbus_a2a.serving.asking`)
``completed``            ``TASK_STATE_COMPLETED``; the answer is the ``answer`` artifact
``failed``               ``TASK_STATE_FAILED``, or ``TASK_STATE_REJECTED`` when the
                         agent refused the request before running it
``cancelled``            ``TASK_STATE_CANCELED``
=======================  ==============================================
"""

from __future__ import annotations

import uuid
from typing import Any

from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.timestamp_pb2 import Timestamp

from toolbus.domain.tasks import Task as BusTask
from toolbus.domain.tasks import TaskStatus as BusStatus
from toolbus_a2a.serving.asking import question_parts
from toolbus_a2a.serving.records import TaskRecord

#: The artifact a task's answer is.
ANSWER = "answer"
#: Error types of a request the agent refused before running it (A2A's "rejected").
REFUSALS = frozenset(
    {
        "access-denied",
        "insufficient-scope",
        "state-refused",
        "too-many-sessions",
        "no-such-session",
    }
)

_STATES: dict[str, TaskState] = {
    "working": TaskState.TASK_STATE_WORKING,
    "input-required": TaskState.TASK_STATE_INPUT_REQUIRED,
    "completed": TaskState.TASK_STATE_COMPLETED,
    "failed": TaskState.TASK_STATE_FAILED,
    "cancelled": TaskState.TASK_STATE_CANCELED,
}
#: A2A states no task leaves, and those in which it waits for its caller.
TERMINAL = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
INTERRUPTED = frozenset({TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED})


def a2a_state(task: BusTask) -> TaskState:
    if task.status == "failed" and task.error is not None and task.error.type in REFUSALS:
        return TaskState.TASK_STATE_REJECTED
    return _STATES[task.status]


def bus_status(state: TaskState) -> BusStatus | None:
    """The toolbus status an A2A ``status`` filter names (``None``: no toolbus task has it)."""
    for status, known in _STATES.items():
        if known == state:
            return status  # type: ignore[return-value]
    return None


def agent_message(content: str | list[Part], record: TaskRecord, **metadata: Any) -> Message:
    """A message from the agent in ``record``'s task: ``content``, a text or its parts."""
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_AGENT,
        parts=[Part(text=content)] if isinstance(content, str) else content,
        task_id=record.task_id,
        context_id=record.context_id,
    )
    if metadata:
        message.metadata.update(metadata)
    return message


def _timestamp(seconds: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(seconds * 1e9))
    return stamp


def status_of(task: BusTask, record: TaskRecord) -> TaskStatus:
    """The A2A status of ``task``: its state, and a message saying what it waits for or
    why it failed."""
    status = TaskStatus(state=a2a_state(task), timestamp=_timestamp(task.updated_at))
    text = None
    if task.status == "input-required":
        text = task.message or "waiting for input"
    elif task.error is not None:
        text = task.error.message
    elif task.status == "cancelled":
        text = task.message
    if task.status == "input-required" and task.input_requests:
        parts = question_parts(task.input_requests)
        status.message.CopyFrom(
            agent_message(parts, record, toolbus={"asks": sorted(task.input_requests)})
        )
    elif text:
        extra: dict[str, Any] = {}
        if task.approval_id is not None:
            extra["toolbus"] = {"approval": task.approval_id}
        if task.error is not None:
            extra["toolbus"] = {"error": task.error.type}
        status.message.CopyFrom(agent_message(text, record, **extra))
    return status


def waits_for_caller(task: BusTask) -> bool:
    """Whether ``task`` waits for someone (an approval, or its caller's answers): not in
    the moment between the last answer and its run going on with them."""
    return task.status == "input-required" and task.input_requests != {}


def answer_artifact(text: str) -> Artifact:
    return Artifact(artifact_id=ANSWER, name=ANSWER, parts=[Part(text=text)])


def a2a_task(task: BusTask, record: TaskRecord) -> Task:
    """The A2A task ``task`` is, with ``record``'s context and history."""
    shown = Task(id=task.id, context_id=record.context_id, status=status_of(task, record))
    for message in record.history:
        shown.history.append(ParseDict(message, Message(), ignore_unknown_fields=True))
    if task.result is not None:
        shown.artifacts.append(answer_artifact(task.result))
    shown.metadata.update({"toolbus": {"agent": record.agent, "state": task.state or ""}})
    return shown


def status_event(task: BusTask, record: TaskRecord) -> TaskStatusUpdateEvent:
    return TaskStatusUpdateEvent(
        task_id=task.id, context_id=record.context_id, status=status_of(task, record)
    )


def working_event(record: TaskRecord, text: str, **metadata: Any) -> TaskStatusUpdateEvent:
    """Progress while the task works: ``text`` says what the agent does."""
    status = TaskStatus(state=TaskState.TASK_STATE_WORKING)
    status.timestamp.GetCurrentTime()
    status.message.CopyFrom(agent_message(text, record, **metadata))
    return TaskStatusUpdateEvent(
        task_id=record.task_id, context_id=record.context_id, status=status
    )


def answer_chunk(
    record: TaskRecord, text: str, *, append: bool, last: bool
) -> TaskArtifactUpdateEvent:
    return TaskArtifactUpdateEvent(
        task_id=record.task_id,
        context_id=record.context_id,
        artifact=answer_artifact(text),
        append=append,
        last_chunk=last,
    )


def message_json(message: Message) -> dict[str, Any]:
    shown: dict[str, Any] = MessageToDict(message)
    return shown
