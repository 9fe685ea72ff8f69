"""Authenticating HTTP requests: the bearer header for the API, also a console session."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from toolbus.application.identity.bearer import AuthFailure, Principal
from toolbus.application.identity.credentials import Secret, bearer_token
from toolbus_gateway.console_sessions import SESSION_COOKIE, ConsoleSession, ConsoleSessions
from toolbus_gateway.gateway import Gateway


class ConsoleForbidden(Exception):
    """An authenticated user who is not an operator asked for the console (HTTP 403)."""

    def __init__(self, user: str) -> None:
        super().__init__(user)
        self.user = user

    @property
    def message(self) -> str:
        return (
            f"user {self.user!r} may not open the console; it is for the users in "
            "console-users ([gateway]), or with '*' among their groups when that is not set"
        )


def gateway_of(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


async def authenticate(request: Request, token: Secret | None) -> Principal:
    """The caller ``token`` proves; an identity provider's keys are fetched again when the
    token names one not at hand. Failures are counted."""
    gateway = gateway_of(request)
    try:
        return await gateway.authenticator.authenticate_fetching(token)
    except AuthFailure as failure:
        gateway.metrics.auth_failures.labels(failure.reason).inc()
        raise


#: Declares the scheme in the OpenAPI document; the header is read by bearer_token.
BEARER = HTTPBearer(
    auto_error=False, scheme_name="bearer", description="An API key or a JWT, as a bearer token."
)


async def api_caller(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(BEARER)]
) -> Principal:
    """The caller of an API request: ``Authorization: Bearer`` only (no cookies: no CSRF)."""
    return await authenticate(request, bearer_token(request.headers.get("authorization")))


def console_sessions(request: Request) -> ConsoleSessions:
    sessions: ConsoleSessions = request.app.state.console_sessions
    return sessions


async def console_session(request: Request) -> ConsoleSession | None:
    """The console session the request's cookie holds, if it is valid."""
    cookie = request.cookies.get(SESSION_COOKIE)
    return await console_sessions(request).read(cookie, gateway_of(request).state_store)


async def console_caller(request: Request) -> Principal:
    """The caller of a console page: the bearer header, else a console session; operators only."""
    token = bearer_token(request.headers.get("authorization"))
    session = await console_session(request) if token is None else None
    caller = session.principal if session is not None else await authenticate(request, token)
    if not gateway_of(request).may_use_console(caller.user):
        raise ConsoleForbidden(caller.user)
    return caller
