"""How a tool call is answered: its outcome, or its task (``202 Accepted``).

One function for the routes that make calls (``/v1/tools/{name}/call``, answered
by FastAPI or directly, and a held session's ``calls``): the call is made, or
started as a task, by the gateway's :class:`~toolbus_gateway.tasks.GatewayTasks`,
and the answer is the same bytes whichever route took it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from toolbus import AgentSession, CallOutcome
from toolbus.application.identity.bearer import Principal
from toolbus.application.tasks import task_kinds
from toolbus.domain.calls.input_requests import InputKind
from toolbus.domain.errors import UnknownTool
from toolbus.domain.tasks import Task
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.limited import limited_refusal
from toolbus_gateway.models import call_status, outcome_json
from toolbus_gateway.preference import Preference
from toolbus_gateway.tasks import GatewayTasks, runs_as_task

JSON = b"application/json"
#: Where a task is read: its Location.
TASKS_PATH = "/v1/tasks/"


@dataclass(frozen=True, slots=True)
class Answer:
    """An HTTP answer: status, JSON body, headers (besides the security headers)."""

    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]]


def outcome_answer(gateway: Gateway, outcome: CallOutcome, *, in_session: bool = False) -> Answer:
    """A call's outcome: 200, or the status of its failure, ``429`` with ``Retry-After``
    for a limit's or budget's refusal (a session's calls are always 200: the outcome is
    for its model)."""
    if not in_session:
        refused = limited_refusal(gateway, outcome)
        if refused is not None:
            body, retry = refused
            headers = [(b"content-type", JSON), (b"retry-after", str(retry).encode())]
            return Answer(429, body, headers)
    status = 200 if in_session else call_status(outcome)
    return Answer(status, outcome_json(outcome), [(b"content-type", JSON)])


def task_answer(task: Task, preference: Preference) -> Answer:
    """``202 Accepted``: the task, where to read it, and the preference honoured."""
    headers = [
        (b"content-type", JSON),
        (b"location", (TASKS_PATH + task.id).encode()),
    ]
    if preference.respond_async:
        headers.append((b"preference-applied", b"respond-async"))
    return Answer(202, orjson.dumps(task.view()), headers)


def tasks_of(gateway: Gateway) -> GatewayTasks:
    tasks = gateway.tasks
    if tasks is None:
        raise RuntimeError("the gateway is not running")
    return tasks


def wants_task(
    gateway: Gateway, name: str, preference: Preference, can_answer: Collection[InputKind] = ()
) -> bool:
    """Whether the call may run as a task from the start (:func:`runs_as_task`; then its
    session allows a task's call time)."""
    try:
        support = gateway.registry.tool(name).task_support
    except UnknownTool:
        return False
    return runs_as_task(support, preference, can_answer)


async def answer_call(
    gateway: Gateway,
    caller: Principal,
    name: str,
    arguments: Mapping[str, Any] | str | None,
    groups: list[str] | None,
    state: str | None,
    preference: Preference,
    can_answer: Collection[InputKind] = (),
) -> Answer:
    """One call outside a session: InsufficientScope for groups beyond the caller's token's
    scopes; AccessDenied and StateRefused (audited) beyond the user's permissions.
    ``can_answer``: what the caller can answer its tool, should it ask."""
    tasks = tasks_of(gateway)
    caller.within(groups)
    if wants_task(gateway, name, preference, can_answer):
        session: AgentSession = tasks.session(caller.user, groups, state)
    else:
        assert gateway.door is not None
        session = gateway.door.open(caller.user, groups, state, counted=False)
    answered = await tasks.begin(session, name, arguments, None, preference, can_answer=can_answer)
    return await settled(gateway, answered, preference)


async def settled(
    gateway: Gateway,
    answered: CallOutcome | Task,
    preference: Preference,
    *,
    in_session: bool = False,
) -> Answer:
    """The answer to what :meth:`GatewayTasks.begin` came to: a task is waited for as long
    as the caller lets it (``Prefer: wait``) or, for a call that waits for a person or may
    ask its caller, ``approval-wait``; then it is the task."""
    if isinstance(answered, CallOutcome):
        return outcome_answer(gateway, answered, in_session=in_session)
    tasks = tasks_of(gateway)
    if (answered.status == "input-required" or task_kinds(answered)) and not (
        preference.respond_async
    ):
        seconds = tasks.settings.approval_wait
        if preference.wait is not None:
            seconds = min(seconds, preference.wait)
    else:
        seconds = preference.wait or 0.0
    result = await tasks.settle(answered, seconds)
    if isinstance(result, CallOutcome):
        return outcome_answer(gateway, result, in_session=in_session)
    return task_answer(result, preference)
