"""The gateway's ASGI application: routes, error answers, limits and the lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolbus._internal.web_server import several_authorizations
from toolbus.application.doors.store_health import RETRY_AFTER
from toolbus.application.identity.bearer import AuthFailure, InsufficientScope, KeysUnavailable
from toolbus.domain.errors import (
    AccessDenied,
    ApprovalClosed,
    ApprovalNotFound,
    ConfigError,
    LimitReached,
    NotAnApprover,
    SessionNotFound,
    StateStoreUnavailable,
    TaskClosed,
    TaskNotAsking,
    TaskNotFound,
    ToolbusError,
    UnfitAnswers,
    UnknownTool,
)
from toolbus_gateway import (
    approval_routes,
    asyncapi,
    console,
    console_tasks,
    health,
    service_routes,
    session_routes,
    task_routes,
    tool_routes,
)
from toolbus_gateway.console_sessions import ConsoleSessions
from toolbus_gateway.credential_headers import OneCredential
from toolbus_gateway.direct import HEALTHZ, DirectRoutes
from toolbus_gateway.discovery import metadata_router
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import ConsoleForbidden, gateway_of
from toolbus_gateway.limits import BodySizeLimit
from toolbus_gateway.routing import allowed_methods
from toolbus_gateway.security_headers import SecurityHeaders
from toolbus_gateway.sessions import SessionExists
from toolbus_gateway.streams import STREAMS_RETRY_AFTER, StreamLimit
from toolbus_gateway.tasks import GatewayStopping

#: Seconds a caller waits before trying again while the identity provider's keys are missing.
KEYS_RETRY_AFTER = 10


class GatewayApp(FastAPI):
    """FastAPI, with ``/healthz`` and ordinary tool calls answered before its router
    (:class:`~toolbus_gateway.direct.DirectRoutes`)."""

    direct: DirectRoutes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and not several_authorizations(scope["headers"]):
            direct = self.direct
            matched = direct.match(scope)
            if matched == HEALTHZ:
                await direct.healthz(send)
                return
            if matched is not None:
                handed_on = await direct.call(scope, receive, send, matched)
                if handed_on is None:
                    return
                receive = handed_on
        await super().__call__(scope, receive, send)


def create_app(gateway: Gateway, *, run_gateway: bool = True) -> FastAPI:
    """The ASGI app serving ``gateway``; running it (uvicorn) starts and stops the gateway.

    With ``run_gateway=False`` the caller has entered ``gateway`` already (so that,
    say, a broker that is down is reported before the server starts).
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if not run_gateway:
            yield
            return
        async with gateway:
            yield

    app = GatewayApp(
        title="toolbus gateway",
        version="1",
        summary="Tools and agent sessions over HTTP, for authenticated users",
        description=(
            "Authenticate with `Authorization: Bearer <API key or JWT>`. "
            "The tool groups a caller may use come from the permissions of "
            "the user the credential names."
        ),
        lifespan=lifespan,
        # The browsable pages load their scripts from a CDN; /openapi.json is enough,
        # and any OpenAPI viewer opens it.
        docs_url=None,
        redoc_url=None,
    )
    app.state.gateway = gateway
    app.direct = DirectRoutes(gateway, error_answer)
    app.state.console_sessions = ConsoleSessions.from_settings(gateway.settings)
    app.include_router(tool_routes.router)
    app.include_router(session_routes.router)
    app.include_router(service_routes.router)
    app.include_router(approval_routes.router)
    app.include_router(task_routes.router)
    app.include_router(health.router)
    app.include_router(console.router)
    app.include_router(console_tasks.router)
    app.include_router(asyncapi.router)
    if gateway.authenticator.resource is not None:
        app.include_router(metadata_router(gateway.authenticator.resource))
    app.mount("/console/static", StaticFiles(directory=console.STATIC), name="console-static")
    app.add_api_route("/favicon.ico", console.favicon, include_in_schema=False)
    _add_error_answers(app)
    app.add_middleware(OneCredential)
    app.add_middleware(BodySizeLimit, max_bytes=gateway.settings.max_body_bytes)
    app.add_middleware(RequestCounter, gateway=gateway)
    app.add_middleware(SecurityHeaders)
    return app


def _error(status: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def _unauthenticated(gateway: Gateway, exc: AuthFailure) -> JSONResponse:
    response = _error(401, "unauthenticated", exc.message, reason=exc.reason)
    response.headers["WWW-Authenticate"] = gateway.authenticator.challenge(exc)
    return response


def _insufficient_scope(gateway: Gateway, exc: InsufficientScope) -> JSONResponse:
    gateway.metrics.auth_failures.labels(exc.reason).inc()
    response = _error(
        403,
        "insufficient-scope",
        exc.message,
        denied_groups=list(exc.denied),
        scopes=list(exc.scopes),
    )
    response.headers["WWW-Authenticate"] = gateway.authenticator.challenge(exc)
    return response


def _no_keys(gateway: Gateway, exc: KeysUnavailable) -> JSONResponse:
    # The identity provider cannot be reached: nothing the caller sent was wrong.
    response = _error(503, "keys-unavailable", str(exc))
    response.headers["Retry-After"] = str(KEYS_RETRY_AFTER)
    return response


def _denied(gateway: Gateway, exc: AccessDenied) -> JSONResponse:
    # access-denied (groups) or state-refused (a state that is not an entry state)
    return _error(403, exc.error_type, str(exc), denied_groups=list(exc.denied))


def _not_operator(gateway: Gateway, exc: ConsoleForbidden) -> JSONResponse:
    return _error(403, "forbidden", exc.message)


def _too_many(gateway: Gateway, exc: LimitReached) -> JSONResponse:
    gateway.metrics.limited.labels(f"{exc.kind}-per-user").inc()
    response = _error(429, f"too-many-{exc.kind}", str(exc))
    response.headers["Retry-After"] = str(exc.retry_after)
    return response


def _too_many_streams(gateway: Gateway, exc: StreamLimit) -> JSONResponse:
    gateway.metrics.limited.labels("event-streams").inc()
    response = _error(429, "too-many-streams", str(exc))
    response.headers["Retry-After"] = str(STREAMS_RETRY_AFTER)
    return response


def _session_exists(gateway: Gateway, exc: SessionExists) -> JSONResponse:
    return _error(409, "session-exists", str(exc))


def _no_session(gateway: Gateway, exc: SessionNotFound) -> JSONResponse:
    return _error(404, "no-such-session", str(exc))


def _no_approval(gateway: Gateway, exc: ApprovalNotFound) -> JSONResponse:
    return _error(404, "no-such-approval", str(exc))


def _not_an_approver(gateway: Gateway, exc: NotAnApprover) -> JSONResponse:
    return _error(403, "not-an-approver", str(exc))


def _approval_closed(gateway: Gateway, exc: ApprovalClosed) -> JSONResponse:
    return _error(409, "approval-closed", str(exc), approval_status=exc.status)


def _no_task(gateway: Gateway, exc: TaskNotFound) -> JSONResponse:
    return _error(404, "no-such-task", str(exc))


def _task_closed(gateway: Gateway, exc: TaskClosed) -> JSONResponse:
    return _error(409, "task-closed", str(exc), task_status=exc.status)


def _not_asking(gateway: Gateway, exc: TaskNotAsking) -> JSONResponse:
    return _error(409, "task-not-asking", str(exc), task_status=exc.status)


def _unfit_answers(gateway: Gateway, exc: UnfitAnswers) -> JSONResponse:
    return _error(422, "unfit-answers", str(exc))


def _stopping(gateway: Gateway, exc: GatewayStopping) -> JSONResponse:
    response = _error(503, "unavailable", str(exc))
    response.headers["Retry-After"] = "1"
    return response


def _no_tool(gateway: Gateway, exc: UnknownTool) -> JSONResponse:
    return _error(404, "no-such-tool", str(exc))


def _bad_config(gateway: Gateway, exc: ConfigError) -> JSONResponse:
    return _error(500, "config-error", str(exc))


def _unavailable(gateway: Gateway, exc: ToolbusError) -> JSONResponse:
    # The bus failed under a call: nothing the caller sent was wrong.
    response = _error(
        503,
        "unavailable",
        f"the broker could not serve the call ({type(exc).__name__}); retry in {RETRY_AFTER} s",
        down="broker",
    )
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


def _store_unavailable(gateway: Gateway, exc: StateStoreUnavailable) -> JSONResponse:
    # The store's own text names its address: the caller needs to know what, not where.
    if gateway.store_health is not None:
        gateway.store_health.failed(exc)
    response = _error(
        503,
        "unavailable",
        "the state store the gateway keeps sessions in cannot be reached now; retry in "
        f"{RETRY_AFTER} s (a call whose session could not be saved after it ran may have run)",
        down="state",
    )
    response.headers["Retry-After"] = str(RETRY_AFTER)
    return response


#: How each failure a route lets through is answered, for FastAPI's routes and the
#: direct ones alike (the most specific class that matches wins).
ERROR_ANSWERS: dict[type[Exception], Callable[[Gateway, Any], JSONResponse]] = {
    AuthFailure: _unauthenticated,
    InsufficientScope: _insufficient_scope,
    KeysUnavailable: _no_keys,
    AccessDenied: _denied,
    ConsoleForbidden: _not_operator,
    LimitReached: _too_many,
    StreamLimit: _too_many_streams,
    SessionExists: _session_exists,
    SessionNotFound: _no_session,
    ApprovalNotFound: _no_approval,
    NotAnApprover: _not_an_approver,
    ApprovalClosed: _approval_closed,
    TaskNotFound: _no_task,
    TaskClosed: _task_closed,
    TaskNotAsking: _not_asking,
    UnfitAnswers: _unfit_answers,
    GatewayStopping: _stopping,
    UnknownTool: _no_tool,
    ConfigError: _bad_config,
    StateStoreUnavailable: _store_unavailable,
    ToolbusError: _unavailable,
}


def error_answer(gateway: Gateway, exc: Exception) -> JSONResponse | None:
    """The answer to ``exc`` (:data:`ERROR_ANSWERS`), or None for an unexpected failure."""
    for kind in type(exc).__mro__:
        answer = ERROR_ANSWERS.get(kind)
        if answer is not None:
            return answer(gateway, exc)
    return None


def _add_error_answers(app: FastAPI) -> None:
    for kind, answer in ERROR_ANSWERS.items():
        app.add_exception_handler(kind, _handler(answer))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            reason = next(
                (e.get("ctx", {}).get("error") for e in errors if e.get("type") == "json_invalid"),
                None,
            )
            return _error(
                400,
                "bad-json",
                f"the request body is not valid JSON ({reason or 'malformed'}); send a JSON "
                "object with Content-Type: application/json",
            )
        problems = [_problem(e) for e in errors]
        return _error(422, "bad-request", "; ".join(problems), problems=problems)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        # No such path or method, and whatever else Starlette answers itself: in the
        # same shape as every other error.
        error = {404: "not-found", 405: "method-not-allowed"}.get(exc.status_code, "bad-request")
        response = _error(exc.status_code, error, str(exc.detail))
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        if exc.status_code == 405:
            response.headers["Allow"] = ", ".join(allowed_methods(request))
        return response


def _handler(
    answer: Callable[[Gateway, Any], JSONResponse],
) -> Callable[[Request, Exception], Awaitable[JSONResponse]]:
    async def handle(request: Request, exc: Exception) -> JSONResponse:
        return answer(gateway_of(request), exc)

    return handle


def _problem(error: Any) -> str:
    location = [str(part) for part in error.get("loc", ()) if part != "body"]
    where = ".".join(location) or "body"
    return f"{where}: {error.get('msg', 'invalid')}"


class RequestCounter:
    """Counts answered requests by route and status (``toolbus_gateway_http_requests_total``)."""

    def __init__(self, app: ASGIApp, gateway: Gateway) -> None:
        self.app = app
        self.gateway = gateway

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def counted(message: Message) -> None:
            if message["type"] == "http.response.start":
                route = scope.get("route")
                template = getattr(route, "path", None) or "unmatched"
                self.gateway.metrics.requests.labels(template, str(message["status"])).inc()
            await send(message)

        await self.app(scope, receive, counted)
