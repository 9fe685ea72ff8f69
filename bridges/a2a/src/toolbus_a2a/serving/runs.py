"""The work of an A2A task: an agent's run on the bus, followed to its end.

The task's request goes to the agent service as an
:class:`~toolbus.domain.agent.wire.AgentRequest` (its bus request id is kept in
the task's record); each event that comes back is written to the task (status,
approval, chunks) and published on the door's task event stream as A2A sees it:

=================  ==============================================================
agent event        A2A event
=================  ==============================================================
``thought``        status ``working``, the thought as its message
``action``         status ``working``: "calling TOOL", the call in its metadata
``approval``       status ``input-required``: whom the call waits for
``waiting``        none: the run suspended while that approval waits (still
                   ``input-required``); its next events follow from any replica
``input``          status ``input-required``, the tool's question as its message;
                   once the caller answered (from any replica), ``working`` again
``observation``    status ``working``, the observation as its message
``answer``         chunks of the ``answer`` artifact, then the whole answer
``error``          status ``failed`` (``rejected`` when the agent refused to run)
=================  ==============================================================

A replica that goes on with a task another one left (it stopped, or died)
follows the same run by its request id: the agent service goes on with it
whoever listens, so only the events sent while nobody listened are missed.
The agent's last event carries only the part of the answer not streamed
before it, so a run whose answer had begun streaming to the replica that left
cannot be answered whole: its task fails saying so (the caller sends the
message again), rather than completing with the end of an answer. A task
that waits for its caller's answers when it is taken over has them sent to
the run from the replica going on with it, wherever they are given.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from a2a.server.cluster import VersionedEvent
from a2a.server.events import Event
from a2a.types import TaskStatusUpdateEvent

from toolbus.application.agent.client import AgentClient
from toolbus.application.tasks import TaskBook, TaskEnd, TaskProgress
from toolbus.application.tasks.asking import TaskInputRelay
from toolbus.application.tasks.runner import Resume
from toolbus.domain.agent.wire import AgentEvent, AgentRequest
from toolbus.domain.calls.input_requests import InputRequest
from toolbus.domain.errors import TaskClosed
from toolbus.domain.tasks import Task, TaskError
from toolbus.domain.tasks import TaskStatus as BusStatus
from toolbus_a2a.serving.asking import readable_requests
from toolbus_a2a.serving.events import BusTaskEventStream, now_version
from toolbus_a2a.serving.records import A2ARecords, ContextRecord, TaskRecord
from toolbus_a2a.serving.views import (
    answer_chunk,
    message_json,
    status_event,
    working_event,
)

log = logging.getLogger("toolbus.a2a")


@dataclass(frozen=True, slots=True)
class RunParts:
    """What every run of one door uses."""

    agents: AgentClient
    book: TaskBook
    records: A2ARecords
    events: BusTaskEventStream
    #: Seconds a run may take, all told, besides its waits for a person's approval.
    timeout: float
    #: Seconds a task is kept once it ended.
    ttl: float


async def publish(events: BusTaskEventStream, task_id: str, event: Event) -> None:
    """Publish one of ``task_id``'s events for every replica's streams."""
    try:
        await events.publish(task_id, VersionedEvent(event, now_version()))
    except Exception as exc:  # a stream subscriber misses it; the task still has it
        log.warning("task %s: an event could not be published: %s", task_id, exc)


class AgentRun:
    """Follows one agent run for its task; see the module docs."""

    def __init__(
        self,
        parts: RunParts,
        record: TaskRecord,
        progress: TaskProgress,
        user: str,
        *,
        missed: int = 0,
    ) -> None:
        self.parts = parts
        self.record = record
        self.progress = progress
        #: Whom the run is for: the task's owner, who answers what its tools ask.
        self.user = user
        #: Chunks of the answer another replica heard before this one followed the run.
        self.missed = missed
        self.answer: list[str] = []
        self._thought: list[str] = []
        self._waiting = False

    async def publish(self, event: Event) -> None:
        await publish(self.parts.events, self.record.task_id, event)

    async def step(self, event: TaskStatusUpdateEvent) -> None:
        """A step of the run (a thought, a call, what it answered, an approval waited
        for): kept in the task's history, so that a caller reading the task sees it, and
        published."""
        try:
            await self.parts.records.said(
                self.record.task_id, message_json(event.status.message), ttl=self.kept_for
            )
        except Exception as exc:  # the step is still published; the task holds the rest
            log.warning("task %s: a step could not be kept: %s", self.record.task_id, exc)
        await self.publish(event)

    @property
    def kept_for(self) -> float:
        """Seconds the task's record is kept from now (it may run the timeout, then its ttl)."""
        return self.parts.ttl + self.parts.timeout

    async def _status(self) -> None:
        task = await self.parts.book.get(self.record.task_id)
        if task is not None:
            await self.step(status_event(task, self.record))

    async def take(self, event: AgentEvent) -> None:
        """One event of the run, written to the task and published."""
        kind = event.chunk_type
        if kind == "waiting":
            # The run suspended until the approval announced before it is decided: the
            # task still waits for that person, and the run's next events follow.
            return
        if self._waiting and kind != "approval":
            self._waiting = False
            await self.progress.going_on()
        if kind == "thought":
            self._thought.append(event.content)
            if event.end_of_message:
                text, self._thought = "".join(self._thought), []
                if text.strip():
                    await self.step(working_event(self.record, text, toolbus={"event": kind}))
        elif kind == "action":
            call: dict[str, Any] = {"event": kind, "tool": event.tool or event.content}
            if isinstance(event.arguments, dict):
                call["arguments"] = event.arguments
            await self.step(working_event(self.record, f"calling {call['tool']}", toolbus=call))
        elif kind == "approval":
            approval = event.approval
            who = ", ".join(approval.approvers) if approval is not None else ""
            message = f"waiting for approval by {who}" if who else "waiting for approval"
            await self.progress.waiting(message, None if approval is None else approval.id)
            self._waiting = True
            await self._status()
        elif kind == "observation":
            await self.step(
                working_event(
                    self.record,
                    event.content,
                    toolbus={"event": kind, "tool": event.tool or "", "status": event.status or ""},
                )
            )
        elif kind == "answer" and event.content:
            first = not self.answer
            self.answer.append(event.content)
            await self.progress.chunk()
            # The last event carries the rest of the answer (the text not streamed yet),
            # so it is a chunk too, unless it is the whole answer: that goes out once,
            # as the last chunk, when the run ends.
            if not (event.last and first):
                await self.publish(
                    answer_chunk(self.record, event.content, append=not first, last=False)
                )

    def end(self, last: AgentEvent) -> TaskEnd:
        if last.chunk_type == "error":
            error = last.error
            return TaskEnd(
                error=TaskError(
                    type=error.type if error is not None else "agent-failed",
                    message=error.message if error is not None else last.content,
                ),
                state=last.state,
            )
        if self.missed:
            return TaskEnd(
                error=TaskError(
                    type="unavailable",
                    message=f"the answer's first {self.missed} chunk(s) went to a replica of "
                    "the door that stopped while the agent answered; send the message again",
                ),
                state=last.state,
            )
        return TaskEnd(result="".join(self.answer), state=last.state)

    async def finish(self, end: TaskEnd) -> None:
        """The last events: the whole answer, and the final status (as the task will be)."""
        if end.result is not None:
            await self.publish(answer_chunk(self.record, end.result, append=False, last=True))
        task = await self.parts.book.get(self.record.task_id)
        if task is not None and not task.final:
            status: BusStatus = "completed" if end.error is None else "failed"
            ended = task.moved(
                task.updated_at, status, result=end.result, error=end.error, state=end.state
            )
            await self.publish(status_event(ended, self.record))

    async def follow(self, request: AgentRequest | None) -> tuple[TaskEnd, str | None]:
        """Send ``request`` (or, ``None``: follow the run sent earlier) and take its
        events; how it ended, and the session the agent holds after it."""
        agents = self.parts.agents
        # What a tool asks the user waits in the task, told to the caller as its status,
        # until the caller answers it (on any replica); the answers go to the run.
        # Forms only: the agent's own model answers for completions.
        relay = TaskInputRelay(self.progress, frozenset({"elicitation"}), told=self._status)
        if request is not None:
            asked = agents.ask(request, request_id=self.record.request_id, answer=relay.answer)
            return await self._take_all(asked)
        events = agents.follow(self.record.request_id, user=self.user, answer=relay.answer)
        # Questions asked while the replica that left followed the run are in the task:
        # their answers, given on any replica, go to the run from here.
        open_questions = await self._open_questions()
        async with anyio.create_task_group() as answering:
            if open_questions:
                answering.start_soon(self._answer, relay, open_questions)
            ended = await self._take_all(events)
            answering.cancel_scope.cancel()
        return ended

    async def _open_questions(self) -> dict[str, InputRequest]:
        """What the run's tool asks the caller and is not answered yet, as the task holds it."""
        task = await self.parts.book.get(self.record.task_id)
        if task is None or task.status != "input-required" or not task.input_requests:
            return {}
        return readable_requests(task.input_requests)

    async def _answer(self, relay: TaskInputRelay, questions: dict[str, InputRequest]) -> None:
        answers = await relay.answers_to(questions)
        if answers is not None:
            await self.parts.agents.send_answers(self.record.request_id, self.user, answers)

    async def _take_all(self, events: AsyncIterator[AgentEvent]) -> tuple[TaskEnd, str | None]:
        """Take the run's events to its last; how it ended, and the agent's session."""
        with anyio.CancelScope(deadline=anyio.current_time() + self.parts.timeout) as waited:
            async for event in events:
                await self.take(event)
                if event.last:
                    return self.end(event), event.session
                if event.chunk_type == "approval" and event.approval is not None:
                    # A person decides first: as long as the approval may wait for them,
                    # which is not the run's time (nor is it the agent's time_limit).
                    waited.deadline += max(0.0, event.approval.expires_at - time.time())
        assert waited.cancelled_caught
        return (
            TaskEnd(
                error=TaskError(
                    type="timeout",
                    message=f"the agent did not answer within {self.parts.timeout:g} s",
                )
            ),
            None,
        )


async def run_task(
    parts: RunParts,
    record: TaskRecord,
    progress: TaskProgress,
    request: AgentRequest | None,
    context: ContextRecord | None,
    question: str,
    user: str,
    *,
    missed: int = 0,
) -> TaskEnd:
    """The work of a task: its run, followed; its context told the answer. ``missed``:
    chunks of the answer another replica heard before this one followed the run."""
    run = AgentRun(parts, record, progress, user, missed=missed)
    try:
        end, session = await run.follow(request)
    except TaskClosed:  # cancelled (on another replica) while its tool waited for answers
        end = TaskEnd(error=TaskError(type="cancelled", message="the task was cancelled"))
        session = None
    except Exception:
        # Its streams wait for a last event: the failure is one, rather than the runner's.
        reference = uuid.uuid4().hex[:12]
        log.exception("task %s failed (ref %s)", record.task_id, reference)
        error = TaskError(
            type="internal-error", message=f"the run failed inside the door (ref {reference})"
        )
        end, session = TaskEnd(error=error), None
    if context is not None:
        try:
            await parts.records.answered(context, question, end.result, session)
        except Exception as exc:  # the answer stands; the next message starts afresh
            log.warning("context %s could not be kept: %s", context.context_id, exc)
    await run.finish(end)
    return end


async def refuse_task(
    parts: RunParts, record: TaskRecord, progress: TaskProgress, error: TaskError
) -> TaskEnd:
    """The work of a task the door refuses before asking the agent: it ends at once."""
    end = TaskEnd(error=error)
    await AgentRun(parts, record, progress, "").finish(end)
    return end


def resume_work(parts: RunParts) -> Resume:
    """How a replica goes on with an A2A task another replica left."""

    async def resume(task: Task, progress: TaskProgress) -> TaskEnd:
        record = await parts.records.task(task.id)
        if record is None:
            return TaskEnd(
                error=TaskError(
                    type="unavailable",
                    message="the door lost what it knew of this task; send the message again",
                )
            )
        context = await parts.records.context(task.owner, record.context_id, record.agent)
        question = str((task.call.arguments if task.call else {}).get("question", ""))
        return await run_task(
            parts, record, progress, None, context, question, task.owner, missed=task.progress
        )

    return resume
