"""The HTTP API: tools, calls, agent sessions and their streams, live services.

Every route needs an authenticated caller; what the caller may use is decided
by the permissions of the user they authenticated as, never by the request.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from sse_starlette import EventSourceResponse

from toolbus import AgentSession, CallOutcome
from toolbus.application.identity.caller import granting
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import normalize_state
from toolbus.domain.config.schemas import export_tools
from toolbus.domain.errors import AccessDenied, ToolCallError, UnknownTool
from toolbus_gateway.auth import Principal
from toolbus_gateway.events import Event
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import api_caller, gateway_of
from toolbus_gateway.sessions import HeldSession, SessionExists, SessionNotFound

Format = Literal["openai", "anthropic", "mcp"]
#: Seconds between SSE keep-alive comments.
PING_SECONDS = 15

router = APIRouter(prefix="/v1")
CallerDep = Annotated[Principal, Depends(api_caller)]


class StreamLimit(Exception):
    """Too many event streams are open (HTTP 429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the gateway has {limit} event streams open, the most it allows "
            "(max-event-streams in [gateway]); retry later"
        )


# ------------------------------------------------------------------ models


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolList(BaseModel):
    """The tools offered to the caller for these groups in this state."""

    format: Format
    groups: list[str]
    state: str
    tools: list[dict[str, Any]]


class CallRequest(_Body):
    """A single tool call, outside any session."""

    arguments: dict[str, Any] = Field(default_factory=dict)
    groups: list[str] | None = Field(
        None, description="Requested tool groups; absent means ['default'], [] means none."
    )
    state: str | None = Field(None, description="The state to call in; absent means 'undefined'.")


class Transition(BaseModel):
    tool: str
    from_state: str = Field(serialization_alias="from")
    to_state: str = Field(serialization_alias="to")


class CallOutcomeView(BaseModel):
    """How a call came out; ``observation`` is what a model would be shown."""

    name: str
    tool: str | None
    status: Literal["ok", "error", "refused"]
    observation: str
    state: str
    refusal: str | None = None
    error_type: str | None = None
    tool_call_id: str | None = None
    transition: Transition | None = None
    after_execution: str | None = None


class OpenSession(_Body):
    """Open an agent session: the request's groups, initial state and history."""

    groups: list[str] | None = Field(
        None, description="Requested tool groups; absent means ['default'], [] means none."
    )
    state: str | None = None
    messages: list[dict[str, Any]] = Field(
        default_factory=list, description="The history so far; hooks add their results to it."
    )
    format: Format = "openai"
    request_id: str | None = Field(None, min_length=1, max_length=200)


class SessionView(BaseModel):
    session_id: str
    user: str
    groups: list[str]
    state: str
    format: Format
    tools: list[dict[str, Any]]
    messages: list[dict[str, Any]] | None = None


class SessionCall(_Body):
    """A tool call in a session, as an LLM produced it."""

    name: str = Field(min_length=1)
    arguments: dict[str, Any] | str | None = Field(
        None, description="An object, or the JSON text a model produced."
    )
    tool_call_id: str | None = None


class ServiceView(BaseModel):
    service: str
    replicas: list[str]
    age_seconds: float
    expires_in_seconds: float
    request_queue: str | None
    tools: list[str]


class ServicesView(BaseModel):
    """Running services (from their announcements) and the configured service ids."""

    live: list[ServiceView]
    configured: list[str]
    announced_tools: list[str]


# ------------------------------------------------------------------ helpers


def _groups_query(groups: str | None) -> list[str] | None:
    # Absent and empty differ: no parameter means ["default"], "groups=" means none.
    if groups is None:
        return None
    return [g.strip() for g in groups.split(",") if g.strip()]


def _session(
    gateway: Gateway, caller: Principal, groups: list[str] | None, state: str | None, **extra: Any
) -> AgentSession:
    """A session for ``caller``; AccessDenied (counted and audited) for groups beyond theirs."""
    assert gateway.tools is not None
    registry = gateway.registry
    return AgentSession(
        gateway.tools,
        registry,
        user=caller.user,
        groups=groups,
        state=state,
        permissions=gateway.permissions_for(registry),
        audit=gateway.audit,
        metrics=gateway.metrics.toolbus,
        timeout=gateway.settings.call_timeout,
        **extra,
    )


def _result(outcome: CallOutcome) -> CallOutcomeView:
    transition = outcome.transition
    return CallOutcomeView(
        name=outcome.name,
        tool=outcome.tool,
        status=outcome.status,
        observation=outcome.observation,
        state=outcome.state,
        refusal=outcome.refusal,
        error_type=outcome.error_type,
        tool_call_id=outcome.tool_call_id,
        transition=None
        if transition is None
        else Transition(
            tool=transition.tool, from_state=transition.from_state, to_state=transition.to_state
        ),
        after_execution=outcome.after_execution,
    )


def _call_status(outcome: CallOutcome) -> int:
    if outcome.ok:
        return 200
    if outcome.status == "error":
        # Unusable arguments are the caller's to fix; any other error is the tool's.
        return 422 if outcome.error_type == "bad-request" else 502
    if outcome.refusal in ("unknown", "group"):
        return 404  # outside the caller's groups looks exactly like unknown
    if outcome.refusal == "state":
        return 409
    return 403  # denied by a code hook


async def _timed_call(
    gateway: Gateway, session: AgentSession, name: str, arguments: Any, tool_call_id: str | None
) -> CallOutcome:
    started = time.perf_counter()
    outcome = await session.call(name, arguments, tool_call_id=tool_call_id)
    if outcome.tool is not None and outcome.status != "refused":
        gateway.stats.record(outcome.tool, time.perf_counter() - started, outcome.ok)
        gateway.changes.mark("stats")
    return outcome


def _view(held: HeldSession, format: Format, messages: list[dict[str, Any]] | None) -> SessionView:
    session = held.session
    return SessionView(
        session_id=held.id,
        user=session.user,
        groups=list(session.groups),
        state=session.state,
        format=format,
        tools=session.tools(format),
        messages=messages,
    )


async def _event_stream(
    gateway: Gateway, events: AsyncIterator[dict[str, Any]]
) -> AsyncIterator[dict[str, Any]]:
    """Count the stream while it is open (for the limit and the metrics)."""
    gateway.open_streams += 1
    try:
        async for event in events:
            yield event
    finally:
        gateway.open_streams -= 1


def check_stream_room(gateway: Gateway) -> None:
    """Raise :class:`StreamLimit` when no more event streams may open now."""
    if gateway.open_streams >= gateway.settings.max_event_streams:
        raise StreamLimit(gateway.settings.max_event_streams)


def open_stream(gateway: Gateway, events: AsyncIterator[dict[str, Any]]) -> EventSourceResponse:
    """An SSE response of ``events``, or :class:`StreamLimit` when too many are open."""
    check_stream_room(gateway)
    return EventSourceResponse(
        _event_stream(gateway, events),
        ping=PING_SECONDS,
        # A client that stopped reading is dropped once a write waits this long.
        send_timeout=gateway.settings.stream_send_timeout,
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


def sse(event: Event) -> dict[str, Any]:
    return {"event": event.name, "data": json.dumps(event.data)}


# ------------------------------------------------------------------ tools


@router.get("/tools", response_model=ToolList, summary="List the tools offered to the caller")
async def list_tools(
    request: Request,
    caller: CallerDep,
    format: Format = "openai",
    groups: Annotated[
        str | None,
        Query(description="Comma-separated groups; absent means 'default', empty means none."),
    ] = None,
    state: str | None = None,
) -> ToolList:
    """The tools the caller is offered for ``groups`` in ``state``, as ``format`` lists them.

    Groups beyond the caller's permissions answer 403 and are audited.
    """
    gateway = gateway_of(request)
    requested = _groups_query(groups)
    registry = gateway.registry
    permissions = gateway.permissions_for(registry)
    try:
        granted = permissions.check(caller.user, requested)
    except AccessDenied:
        # The session does the counting and auditing of the attempt, then refuses.
        _session(gateway, caller, requested, state)
        raise
    availability = registry.availability(granted, state)
    return ToolList(
        format=format,
        groups=list(granted),
        state=normalize_state(state),
        tools=export_tools(availability.available, format),
    )


@router.post(
    "/tools/{name}/call",
    response_model=CallOutcomeView,
    summary="Call one tool",
    responses={
        404: {"description": "No such tool offered to the caller"},
        409: {"description": "Not offered in this state"},
        502: {"description": "The tool failed"},
    },
)
async def call_tool(
    request: Request, caller: CallerDep, name: str, body: CallRequest
) -> JSONResponse:
    """Call tool ``name`` (its configured or LLM name) once, as a one-call agent session.

    The call is audited like any session. A tool error answers 502 with the
    error's type and the observation.
    """
    gateway = gateway_of(request)
    session = _session(gateway, caller, body.groups, body.state)
    async with session:
        outcome = await _timed_call(gateway, session, name, body.arguments, None)
    return JSONResponse(
        _result(outcome).model_dump(mode="json", by_alias=True), status_code=_call_status(outcome)
    )


@router.post("/tools/{name}/stream", summary="Call one tool and stream its chunks (SSE)")
async def stream_tool(
    request: Request, caller: CallerDep, name: str, body: CallRequest
) -> EventSourceResponse:
    """Call tool ``name`` and send each chunk as a ``chunk`` event, then ``end``.

    A tool error ends the stream with an ``error`` event
    (``{"error_type", "message"}``).
    """
    gateway = gateway_of(request)
    check_stream_room(gateway)  # before the session: a refusal leaves nothing open
    session = _session(gateway, caller, body.groups, body.state)
    tool = _offered(session, name)
    if tool is None:
        await session.close()
        raise UnknownTool(
            f"no tool {name!r} is offered for groups {list(session.groups)!r} in state "
            f"{session.state!r}; list them with GET /v1/tools"
        )
    tools = gateway.tools
    assert tools is not None

    async def chunks() -> AsyncIterator[dict[str, Any]]:
        started = time.perf_counter()
        ok = False
        try:
            stream = tools.stream(
                tool.name, body.arguments, user=caller.user, timeout=gateway.settings.call_timeout
            )
            # The request, and the call token vouching for the granted groups, go out
            # with the first step; no yield inside the block, so the context stays ours.
            with granting(session.groups):
                first = await anext(stream, None)
            if first is not None:
                yield {"event": "chunk", "data": first}
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
            gateway.stats.record(tool.name, time.perf_counter() - started, ok)
            with anyio.CancelScope(shield=True):
                await session.close()

    return open_stream(gateway, chunks())


def _offered(session: AgentSession, name: str) -> ToolDescriptor | None:
    for tool in session.available:
        if name in (tool.name, tool.llm_name):
            return tool
    return None


# ------------------------------------------------------------------ sessions


@router.post("/sessions", response_model=SessionView, status_code=201, summary="Open a session")
async def open_session(request: Request, caller: CallerDep, body: OpenSession) -> SessionView:
    """Open an agent session; answers its tools and the history with hook results injected.

    Groups beyond the caller's permissions answer 403 (audited); too many open
    sessions answer 429 with ``Retry-After``.
    """
    gateway = gateway_of(request)
    gateway.sessions.check_room(caller.user)
    extra: dict[str, Any] = {}
    if body.request_id is not None:
        # Scoped by user: one user's ids never collide with, or reveal, another's.
        extra["request_id"] = f"{caller.user}:{body.request_id}"
        if extra["request_id"] in gateway.sessions:
            raise SessionExists(extra["request_id"])
    session = _session(gateway, caller, body.groups, body.state, **extra)
    try:
        messages = await session.start(body.messages)
        held = gateway.sessions.add(session)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await session.close()
        raise
    gateway.changes.mark("sessions")
    return _view(held, body.format, messages)


@router.get("/sessions/{session_id}", response_model=SessionView, summary="A session's state")
async def get_session(
    request: Request, caller: CallerDep, session_id: str, format: Format = "openai"
) -> SessionView:
    """The session's current state and the tools it is offered now."""
    held = gateway_of(request).sessions.get(caller.user, session_id)
    return _view(held, format, None)


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
    held = gateway.sessions.get(caller.user, session_id)
    async with held.lock:
        if held.session.closed:  # it expired while this call waited for the lock
            raise SessionNotFound(session_id)
        outcome = await _timed_call(
            gateway, held.session, body.name, body.arguments, body.tool_call_id
        )
    result = _result(outcome)
    held.events.publish(Event("call", result.model_dump(mode="json", by_alias=True)))
    return result


@router.delete("/sessions/{session_id}", summary="Close a session")
async def close_session(request: Request, caller: CallerDep, session_id: str) -> dict[str, Any]:
    """Close the session; answers its audit record."""
    gateway = gateway_of(request)
    held = gateway.sessions.get(caller.user, session_id)
    async with held.lock:
        await gateway.sessions.close(held)
    gateway.changes.mark("sessions")
    record = next((r for r in gateway.audit.records if r.request_id == held.id), None)
    return {"session_id": held.id, "audit": None if record is None else record.to_dict()}


@router.get("/sessions/{session_id}/events", summary="A session's events (SSE)")
async def session_events(
    request: Request, caller: CallerDep, session_id: str
) -> EventSourceResponse:
    """``call`` events as calls in the session finish, and ``closed`` when it ends."""
    gateway = gateway_of(request)
    held = gateway.sessions.get(caller.user, session_id)

    async def events() -> AsyncIterator[dict[str, Any]]:
        async with held.events.subscribe() as received:
            yield sse(Event("state", {"session_id": held.id, "state": held.session.state}))
            async for event in received:
                yield sse(event)

    return open_stream(gateway, events())


# ------------------------------------------------------------------ services


@router.get("/services", response_model=ServicesView, summary="Running services")
async def list_services(request: Request, caller: CallerDep) -> ServicesView:
    """Services that announce themselves (replicas, age) and the configured service ids."""
    gateway = gateway_of(request)
    assert gateway.watch is not None
    live = gateway.watch.services()
    announced = (
        sorted(
            str(tool.get("name", key))
            for a in gateway.live_registry.announced
            for key, tool in a.tools.items()
        )
        if gateway.live_registry is not None
        else sorted({name for s in live for name in s.tools})
    )
    return ServicesView(
        live=[
            ServiceView(
                service=s.service,
                replicas=list(s.replicas),
                age_seconds=round(s.age, 3),
                expires_in_seconds=round(s.expires_in, 3),
                request_queue=s.request_queue,
                tools=list(s.tools),
            )
            for s in live
        ],
        configured=sorted(gateway.registry.services),
        announced_tools=announced,
    )
