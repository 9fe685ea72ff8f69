"""``/v1/sessions``: agent sessions held between HTTP requests.

The front door holds each session as plain data under its owner; every call
resumes it, makes the call and keeps what it reached, so that the session's
state, calls and audit record travel with it. A session belongs to the user
who opened it: to anyone else its id does not exist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import anyio
from fastapi import Depends, Request
from fastapi.responses import Response
from sse_starlette import EventSourceResponse

from toolbus import CallOutcome
from toolbus.application.doors.holding import Held
from toolbus.application.doors.keeping import SESSION
from toolbus.application.identity.bearer import Principal
from toolbus.domain.errors import SessionNotFound
from toolbus_gateway.call_answers import settled, tasks_of
from toolbus_gateway.events import Event
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.health import store_needed
from toolbus_gateway.http_auth import gateway_of
from toolbus_gateway.models import (
    CallOutcomeView,
    Format,
    OpenSession,
    SessionCall,
    SessionView,
    outcome_view,
)
from toolbus_gateway.preference import Preference
from toolbus_gateway.routing import CALL_AS_TASK, EVENT_STREAM, EventStreamAnswer, v1_router
from toolbus_gateway.sessions import SessionExists
from toolbus_gateway.streams import open_stream, sse, take_stream
from toolbus_gateway.tool_routes import PREFER, CallerDep

router = v1_router([Depends(store_needed)])

OPEN_ONE = "Open one with POST /v1/sessions"


async def _held(gateway: Gateway, caller: Principal, session_id: str) -> Held:
    """The caller's session ``session_id``, if the caller's token still reaches its groups."""
    assert gateway.door is not None
    held = await gateway.door.held.get(caller.user, SESSION, session_id)
    if held is None:
        raise SessionNotFound(session_id, OPEN_ONE)
    caller.within(held.session.requested_groups)
    return held


def _view(
    gateway: Gateway, held: Held, format: Format, messages: list[dict[str, Any]] | None
) -> SessionView:
    assert gateway.door is not None
    session = gateway.door.resumed(held.session)
    return SessionView(
        session_id=held.key.id,
        user=session.user,
        groups=list(session.groups),
        state=session.state,
        format=format,
        tools=session.tools(format),
        messages=messages,
    )


@router.post("/sessions", response_model=SessionView, status_code=201, summary="Open a session")
async def open_session(request: Request, caller: CallerDep, body: OpenSession) -> SessionView:
    """Open an agent session; answers its tools and the history with hook results injected.

    Groups beyond the caller's permissions, or a state that is not an entry
    state, answer 403 (audited); too many open sessions answer 429 with
    ``Retry-After``.
    """
    gateway = gateway_of(request)
    door = gateway.door
    assert door is not None
    caller.within(body.groups)
    await door.held.check_room(caller.user, SESSION)
    request_id = None
    if body.request_id is not None:
        # Scoped by user: one user's ids never collide with, or reveal, another's.
        request_id = f"{caller.user}:{body.request_id}"
        if await door.held.get(caller.user, SESSION, request_id) is not None:
            raise SessionExists(request_id)
    session = door.open(caller.user, body.groups, body.state, request_id=request_id, counted=False)
    messages = await session.start(body.messages)
    held = await door.held.hold(session, SESSION)
    gateway.changes.mark("sessions")
    return SessionView(
        session_id=held.key.id,
        user=session.user,
        groups=list(session.groups),
        state=session.state,
        format=body.format,
        tools=session.tools(body.format),
        messages=messages,
    )


@router.get("/sessions/{session_id}", response_model=SessionView, summary="A session's state")
async def get_session(
    request: Request, caller: CallerDep, session_id: str, format: Format = "openai"
) -> SessionView:
    """The session's current state and the tools it is offered now."""
    gateway = gateway_of(request)
    return _view(gateway, await _held(gateway, caller, session_id), format, None)


@router.post(
    "/sessions/{session_id}/calls",
    response_model=CallOutcomeView,
    summary="Call a tool in a session",
    responses=CALL_AS_TASK,
)
async def call_in_session(
    request: Request,
    caller: CallerDep,
    session_id: str,
    body: SessionCall,
    prefer: Annotated[str | None, PREFER] = None,
) -> Response:
    """Call a tool offered to the session now; a successful call moves its state.

    Refusals and tool errors are outcomes (status 200) with an observation for
    the model, as an agent loop needs them. A call that runs as a task answers
    202 with the task; its status changes are ``task`` events of the session's
    event stream, and its outcome a ``call`` event when it ends.
    """
    gateway = gateway_of(request)
    door = gateway.door
    assert door is not None
    tasks = tasks_of(gateway)
    preference = Preference.of(request.headers.getlist("prefer"))
    key = (caller.user, session_id)
    if key not in gateway.channels:
        # No channel for ids nobody holds (whose session this is, is checked under the
        # lock); a session served here before has one: a read of the store saved.
        await _held(gateway, caller, session_id)
    async with gateway.channels[key].lock:
        # Read again under the lock: the call before this one may have moved the session.
        held = await _held(gateway, caller, session_id)
        session = door.held.resume(held)
        answered = await tasks.begin(
            session,
            body.name,
            body.arguments,
            body.tool_call_id,
            preference,
            held_id=session_id,
            can_answer=body.can_answer,
        )
        if isinstance(answered, CallOutcome):
            await door.held.keep(held, session)
            result = outcome_view(answered)
            # Under the lock: listeners see the session's calls in the order they were made.
            await gateway.session_events.call(
                caller.user, session_id, result.model_dump(mode="json", by_alias=True)
            )
    answer = await settled(gateway, answered, preference, in_session=True)
    return Response(
        answer.body,
        status_code=answer.status,
        headers={k.decode(): v.decode() for k, v in answer.headers},
    )


@router.delete("/sessions/{session_id}", summary="Close a session")
async def close_session(request: Request, caller: CallerDep, session_id: str) -> dict[str, Any]:
    """Close the session; answers its audit record."""
    gateway = gateway_of(request)
    door = gateway.door
    assert door is not None
    await _held(gateway, caller, session_id)
    async with gateway.channels[caller.user, session_id].lock:
        with anyio.CancelScope(shield=True):
            record = await door.held.release(caller.user, SESSION, session_id)
    if record is None:
        raise SessionNotFound(session_id, OPEN_ONE)
    await gateway.session_events.ended(caller.user, session_id, "closed")
    gateway.changes.mark("sessions")
    return {"session_id": session_id, "audit": record.to_dict()}


@router.get(
    "/sessions/{session_id}/events",
    summary="A session's events (SSE)",
    response_class=EventStreamAnswer,
    responses=EVENT_STREAM,
)
async def session_events(
    request: Request, caller: CallerDep, session_id: str
) -> EventSourceResponse:
    """``call`` events as calls in the session finish, ``task`` events as its calls that run
    as tasks change, and ``closed`` when it ends."""
    gateway = gateway_of(request)
    held = await _held(gateway, caller, session_id)
    leave = take_stream(gateway, caller.user)
    channel = gateway.channels[caller.user, session_id]

    async def events() -> AsyncIterator[dict[str, Any]]:
        async with channel.events.subscribe() as received:
            yield sse(Event("state", {"session_id": session_id, "state": held.session.state}))
            async for event in received:
                yield sse(event)

    return open_stream(gateway, events(), leave)
