"""``/v1/sessions``: agent sessions held between HTTP requests.

The front door holds each session as plain data under its owner; every call
resumes it, makes the call and keeps what it reached, so that the session's
state, calls and audit record travel with it. A session belongs to the user
who opened it: to anyone else its id does not exist.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import Depends, Request
from sse_starlette import EventSourceResponse

from toolbus.application.doors.door import SESSION
from toolbus.application.doors.holding import Held
from toolbus.domain.errors import SessionNotFound
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
from toolbus_gateway.routing import EVENT_STREAM, EventStreamAnswer, v1_router
from toolbus_gateway.sessions import SessionExists
from toolbus_gateway.streams import open_stream, sse, take_stream
from toolbus_gateway.tool_routes import CallerDep, timed_call

router = v1_router([Depends(store_needed)])

OPEN_ONE = "Open one with POST /v1/sessions"


async def _held(gateway: Gateway, user: str, session_id: str) -> Held:
    assert gateway.door is not None
    held = await gateway.door.get(user, SESSION, session_id)
    if held is None:
        raise SessionNotFound(session_id, OPEN_ONE)
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
    await door.check_room(caller.user, SESSION)
    request_id = None
    if body.request_id is not None:
        # Scoped by user: one user's ids never collide with, or reveal, another's.
        request_id = f"{caller.user}:{body.request_id}"
        if await door.get(caller.user, SESSION, request_id) is not None:
            raise SessionExists(request_id)
    session = door.open(caller.user, body.groups, body.state, request_id=request_id, counted=False)
    messages = await session.start(body.messages)
    held = await door.hold(session, SESSION)
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
    return _view(gateway, await _held(gateway, caller.user, session_id), format, None)


@router.post(
    "/sessions/{session_id}/calls",
    response_model=CallOutcomeView,
    summary="Call a tool in a session",
)
async def call_in_session(
    request: Request, caller: CallerDep, session_id: str, body: SessionCall
) -> CallOutcomeView:
    """Call a tool offered to the session now; a successful call moves its state.

    Refusals and tool errors are outcomes (status 200) with an observation for
    the model, as an agent loop needs them.
    """
    gateway = gateway_of(request)
    door = gateway.door
    assert door is not None
    if session_id not in gateway.channels:
        # No channel for ids nobody holds (whose session this is, is checked under the
        # lock); a session served here before has one: a read of the store saved.
        await _held(gateway, caller.user, session_id)
    channel = gateway.channels[session_id]
    async with channel.lock:
        # Read again under the lock: the call before this one may have moved the session.
        held = await _held(gateway, caller.user, session_id)
        session = door.resume(held)
        outcome = await timed_call(gateway, session, body.name, body.arguments, body.tool_call_id)
        await door.keep(held, session)
    result = outcome_view(outcome)
    channel.events.publish(Event("call", result.model_dump(mode="json", by_alias=True)))
    return result


@router.delete("/sessions/{session_id}", summary="Close a session")
async def close_session(request: Request, caller: CallerDep, session_id: str) -> dict[str, Any]:
    """Close the session; answers its audit record."""
    gateway = gateway_of(request)
    door = gateway.door
    assert door is not None
    await _held(gateway, caller.user, session_id)
    async with gateway.channels[session_id].lock:
        with anyio.CancelScope(shield=True):
            record = await door.release(caller.user, SESSION, session_id)
    if record is None:
        raise SessionNotFound(session_id, OPEN_ONE)
    gateway.channels.ended(session_id, "closed")
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
    """``call`` events as calls in the session finish, and ``closed`` when it ends."""
    gateway = gateway_of(request)
    held = await _held(gateway, caller.user, session_id)
    leave = take_stream(gateway, caller.user)
    channel = gateway.channels[session_id]

    async def events() -> AsyncIterator[dict[str, Any]]:
        async with channel.events.subscribe() as received:
            yield sse(Event("state", {"session_id": session_id, "state": held.session.state}))
            async for event in received:
                yield sse(event)

    return open_stream(gateway, events(), leave)
