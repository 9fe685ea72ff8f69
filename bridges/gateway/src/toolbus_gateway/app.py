"""The gateway's ASGI application: routes, error answers, limits and the lifespan."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toolbus.domain.errors import (
    AccessDenied,
    ConfigError,
    LimitReached,
    SessionNotFound,
    ToolbusError,
    UnknownTool,
)
from toolbus_gateway import asyncapi, console, health, service_routes, session_routes, tool_routes
from toolbus_gateway.auth import AuthFailure
from toolbus_gateway.console_sessions import ConsoleSessions
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import ConsoleForbidden, gateway_of
from toolbus_gateway.limits import BodySizeLimit
from toolbus_gateway.sessions import SessionExists
from toolbus_gateway.streams import STREAMS_RETRY_AFTER, StreamLimit


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

    app = FastAPI(
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
    app.state.console_sessions = ConsoleSessions.from_settings(gateway.settings)
    app.include_router(tool_routes.router)
    app.include_router(session_routes.router)
    app.include_router(service_routes.router)
    app.include_router(health.router)
    app.include_router(console.router)
    app.include_router(asyncapi.router)
    app.mount("/console/static", StaticFiles(directory=console.STATIC), name="console-static")
    _add_error_answers(app)
    app.add_middleware(BodySizeLimit, max_bytes=gateway.settings.max_body_bytes)
    app.add_middleware(RequestCounter, gateway=gateway)
    app.add_middleware(SecurityHeaders)
    return app


def _error(status: int, error: str, message: str, **extra: Any) -> JSONResponse:
    return JSONResponse({"error": error, "message": message, **extra}, status_code=status)


def _add_error_answers(app: FastAPI) -> None:
    @app.exception_handler(AuthFailure)
    async def unauthenticated(request: Request, exc: AuthFailure) -> JSONResponse:
        challenge = 'Bearer realm="toolbus"'
        if exc.reason != "missing":
            challenge += f', error="invalid_token", error_description="{exc.reason}"'
        response = _error(401, "unauthenticated", exc.message, reason=exc.reason)
        response.headers["WWW-Authenticate"] = challenge
        return response

    @app.exception_handler(AccessDenied)
    async def denied(request: Request, exc: AccessDenied) -> JSONResponse:
        # access-denied (groups) or state-refused (a state that is not an entry state)
        return _error(403, exc.error_type, str(exc), denied_groups=list(exc.denied))

    @app.exception_handler(ConsoleForbidden)
    async def not_operator(request: Request, exc: ConsoleForbidden) -> JSONResponse:
        return _error(
            403,
            "forbidden",
            f"user {exc.args[0]!r} may not open the console; it is for the users in "
            "console-users ([gateway]), or with '*' among their groups when that is not set",
        )

    @app.exception_handler(LimitReached)
    async def too_many(request: Request, exc: LimitReached) -> JSONResponse:
        gateway_of(request).metrics.limited.labels(f"{exc.kind}-per-user").inc()
        response = _error(429, f"too-many-{exc.kind}", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after)
        return response

    @app.exception_handler(StreamLimit)
    async def too_many_streams(request: Request, exc: StreamLimit) -> JSONResponse:
        gateway_of(request).metrics.limited.labels("event-streams").inc()
        response = _error(429, "too-many-streams", str(exc))
        response.headers["Retry-After"] = str(STREAMS_RETRY_AFTER)
        return response

    @app.exception_handler(SessionExists)
    async def session_exists(request: Request, exc: SessionExists) -> JSONResponse:
        return _error(409, "session-exists", str(exc))

    @app.exception_handler(SessionNotFound)
    async def no_session(request: Request, exc: SessionNotFound) -> JSONResponse:
        return _error(404, "no-such-session", str(exc))

    @app.exception_handler(UnknownTool)
    async def no_tool(request: Request, exc: UnknownTool) -> JSONResponse:
        return _error(404, "no-such-tool", str(exc))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        if any(e.get("type") == "json_invalid" for e in errors):
            return _error(
                400,
                "bad-json",
                "the request body is not valid JSON; send a JSON object with "
                "Content-Type: application/json",
            )
        problems = [_problem(e) for e in errors]
        return _error(422, "bad-request", "; ".join(problems), problems=problems)

    @app.exception_handler(ConfigError)
    async def bad_config(request: Request, exc: ConfigError) -> JSONResponse:
        return _error(500, "config-error", str(exc))

    @app.exception_handler(ToolbusError)
    async def unavailable(request: Request, exc: ToolbusError) -> JSONResponse:
        # The bus failed under a call: nothing the caller sent was wrong.
        return _error(
            503,
            "unavailable",
            f"the broker could not serve the call ({type(exc).__name__}); retry later",
        )


def _problem(error: Any) -> str:
    location = [str(part) for part in error.get("loc", ()) if part != "body"]
    where = ".".join(location) or "body"
    return f"{where}: {error.get('msg', 'invalid')}"


#: Sent with every answer: the console loads only its own script and styles, runs in
#: no frame, and no answer is read as another content type than it says.
SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (b"x-frame-options", b"DENY"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
]


class SecurityHeaders:
    """Adds :data:`SECURITY_HEADERS` to every HTTP answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, with_headers)


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
