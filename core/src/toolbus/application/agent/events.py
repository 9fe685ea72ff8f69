"""What the agent loop reports, as :class:`~toolbus.domain.agent.wire.AgentEvent`: a call it
makes (``action``), a call waiting for a person (``approval``), the run suspended until a
person decides (``waiting``), a tool asking the user (``input``), what a call answered
(``observation``), and how the request ended (``answer`` or ``error``, the last event).

The streamed text of a turn (``thought`` and ``answer`` chunks) is
:mod:`toolbus.application.agent.turn_text`'s.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from toolbus.application.agent.outcomes import CallOutcome
from toolbus.domain.access.approvals import Approval
from toolbus.domain.agent.turns import ToolCall, Usage
from toolbus.domain.agent.wire import AgentEvent, EventApproval, EventTask, EventUsage
from toolbus.domain.calls.input_requests import InputAsk, describe, request_to_json


def action(call: ToolCall, state: str) -> AgentEvent:
    """The model asked for ``call``; it is being made."""
    return AgentEvent(
        chunk_type="action",
        content=call.name,
        tool=call.name,
        arguments=_arguments(call.arguments),
        tool_call_id=call.id,
        state=state,
    )


def waiting(approval: Approval, state: str) -> AgentEvent:
    """A call waits for ``approval``: which one, and who may decide it."""
    return AgentEvent(
        chunk_type="approval",
        content=f"{approval.tool} waits for approval: {approval.reason}",
        tool=approval.tool,
        tool_call_id=approval.tool_call_id,
        arguments=approval.arguments,
        state=state,
        approval=_approval(approval),
    )


def suspended(task_id: str, message: str, first: Approval, state: str) -> AgentEvent:
    """The run waits for a person (``first`` is the approval that expires first) as the
    task ``task_id``, holding no worker; its next events come once it goes on."""
    return AgentEvent(
        chunk_type="waiting",
        content=message,
        state=state,
        approval=_approval(first),
        task=EventTask(id=task_id, status="input-required", message=message),
    )


def _approval(approval: Approval) -> EventApproval:
    return EventApproval(
        id=approval.id,
        approvers=list(approval.approvers),
        reason=approval.reason,
        expires_at=approval.expires_at,
    )


def asking(asked: InputAsk, state: str) -> AgentEvent:
    """A tool asks the user (a form to fill): the requests, by key."""
    return AgentEvent(
        chunk_type="input",
        content=f"a tool asks: {describe(asked.requests)}",
        input_requests={key: request_to_json(r) for key, r in asked.requests.items()},
        state=state,
    )


def observation(outcome: CallOutcome) -> AgentEvent:
    """What a call answered (or why it was not made)."""
    return AgentEvent(
        chunk_type="observation",
        content=outcome.observation,
        tool=outcome.name,
        tool_call_id=outcome.tool_call_id,
        status=outcome.status,
        state=outcome.state,
    )


def final(
    kind: Literal["answer", "error"],
    content: str,
    state: str,
    model: str,
    iterations: int,
    usage: Usage,
    session: str | None,
    cost: float | None = None,
) -> AgentEvent:
    """The request's last event: the answer (or error), the state it ended in, what it
    cost, and the session a later request continues it with."""
    return AgentEvent(
        chunk_type=kind,
        content=content,
        end_of_message=True,
        end_of_dialog=True,
        end_of_stream=True,
        state=state,
        model=model,
        iterations=iterations,
        usage=EventUsage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens),
        cost=cost,
        session=session,
    )


def _arguments(arguments: str) -> dict[str, Any] | str:
    """The call's arguments for the ``action`` event: the object, or the text as written."""
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError:
        return arguments
    return parsed if isinstance(parsed, dict) else arguments
