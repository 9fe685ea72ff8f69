"""``/v1/tools``: the tools offered to the caller, one call, one streamed call.

Every call is a one-call agent session opened by the gateway's front door:
the caller's groups and state are checked (403, audited), code hooks run
around it (a ``Deny`` is 403, post-use hooks rewrite the answer), the call is
signed for the groups granted, and the session's audit record is written. A
stream is such a session too; with post-use hooks installed, its answer is
gathered and sent as one chunk, rewritten.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import Depends, Header, Query, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse

from toolbus import AgentSession, CallOutcome
from toolbus.application.agent.calling import ToolStream
from toolbus.application.identity.bearer import Principal
from toolbus.domain.config.registry import normalize_state
from toolbus.domain.config.schemas import export_tools
from toolbus.domain.errors import ToolCallError
from toolbus_gateway.call_answers import answer_call, outcome_answer
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import api_caller, gateway_of
from toolbus_gateway.models import (
    CallOutcomeView,
    CallRequest,
    Format,
    ToolList,
)
from toolbus_gateway.preference import Preference
from toolbus_gateway.routing import (
    CALL_AS_TASK,
    CALL_REFUSED,
    EVENT_STREAM,
    EventStreamAnswer,
    v1_router,
)
from toolbus_gateway.streams import open_stream, take_stream

router = v1_router()
CallerDep = Annotated[Principal, Depends(api_caller)]


def groups_query(groups: str | None) -> list[str] | None:
    # Absent and empty differ: no parameter means ["default"], "groups=" means none.
    if groups is None:
        return None
    return [g.strip() for g in groups.split(",") if g.strip()]


def one_call_session(gateway: Gateway, caller: Principal, body: CallRequest) -> AgentSession:
    """A session for one call; InsufficientScope for groups beyond the token's scopes,
    AccessDenied / StateRefused (counted and audited) beyond the user's permissions."""
    assert gateway.door is not None
    caller.within(body.groups)
    return gateway.door.open(caller.user, body.groups, body.state, counted=False)


def answered(gateway: Gateway, outcome: CallOutcome) -> Response:
    answer = outcome_answer(gateway, outcome)
    return Response(
        answer.body,
        status_code=answer.status,
        headers={k.decode(): v.decode() for k, v in answer.headers},
    )


@router.get("/tools", response_model=ToolList, summary="List the tools offered to the caller")
async def list_tools(
    request: Request,
    caller: CallerDep,
    format: Format = "openai",
    groups: Annotated[
        str | None,
        Query(description="Comma-separated groups; absent means 'default', empty means none."),
    ] = None,
    state: Annotated[str | None, Query(description="An entry state.")] = None,
) -> ToolList:
    """The tools the caller is offered for ``groups`` in ``state``, as ``format`` lists them.

    Groups beyond the caller's permissions, and a state that is not an entry
    state, answer 403 and are audited.
    """
    gateway = gateway_of(request)
    assert gateway.door is not None
    requested = groups_query(groups)
    caller.within(requested)
    granted = gateway.door.admit(caller.user, requested, state)
    availability = gateway.registry.availability(granted, state)
    return ToolList(
        format=format,
        groups=list(granted),
        state=normalize_state(state),
        tools=export_tools(availability.available, format),
    )


PREFER = Header(
    description="RFC 7240: `respond-async` runs the call as a task (answered 202 with "
    "Location: /v1/tasks/{id}) unless its tool forbids it; `wait=N` answers as a call would "
    "a task that ends within N seconds.",
)


@router.post(
    "/tools/{name}/call",
    response_model=CallOutcomeView,
    summary="Call one tool",
    responses={**CALL_REFUSED, **CALL_AS_TASK},
)
async def call_tool(
    request: Request,
    caller: CallerDep,
    name: str,
    body: CallRequest,
    prefer: Annotated[str | None, PREFER] = None,
) -> Response:
    """Call tool ``name`` (its configured or LLM name) once, as a one-call agent session.

    The call is audited like any session. A tool error answers 502 with the
    error's type and the observation. A call that runs as a task (asked for,
    required by its tool, or waiting for a person longer than ``approval-wait``)
    answers 202 with the task.
    """
    gateway = gateway_of(request)
    answer = await answer_call(
        gateway,
        caller,
        name,
        body.arguments,
        body.groups,
        body.state,
        Preference.of(request.headers.getlist("prefer")),
        body.can_answer,
    )
    return Response(
        answer.body,
        status_code=answer.status,
        headers={k.decode(): v.decode() for k, v in answer.headers},
    )


@router.post(
    "/tools/{name}/stream",
    summary="Call one tool and stream its chunks (SSE)",
    response_class=EventStreamAnswer,
    responses={**EVENT_STREAM, **CALL_REFUSED},
)
async def stream_tool(
    request: Request, caller: CallerDep, name: str, body: CallRequest
) -> Response:
    """Call tool ``name`` and send each chunk as a ``chunk`` event, then ``end``.

    Refusals answer as for ``/call``, before the stream starts. A tool error
    ends the stream with an ``error`` event (``{"error_type", "message"}``).
    """
    gateway = gateway_of(request)
    leave = take_stream(gateway, caller.user)  # before the session: a refusal leaves nothing open
    try:
        session = one_call_session(gateway, caller, body)
        prepared = await session.stream(name, body.arguments)
    except BaseException:
        leave()
        raise
    if isinstance(prepared, CallOutcome):
        leave()
        await session.close()
        return answered(gateway, prepared)
    return _streamed(gateway, session, prepared, leave)


def _streamed(
    gateway: Gateway, session: AgentSession, stream: ToolStream, leave: Any
) -> EventSourceResponse:
    async def chunks() -> AsyncIterator[dict[str, Any]]:
        started = time.perf_counter()
        ok = False
        try:
            async for chunk in stream:
                yield {"event": "chunk", "data": chunk}
            ok = True
            yield {"event": "end", "data": ""}
        except ToolCallError as exc:
            yield {
                "event": "error",
                "data": json.dumps({"error_type": exc.error_type, "message": exc.message}),
            }
        finally:
            gateway.stats.record(stream.tool.name, time.perf_counter() - started, ok)
            with anyio.CancelScope(shield=True):
                await session.close()

    return open_stream(gateway, chunks(), leave)
