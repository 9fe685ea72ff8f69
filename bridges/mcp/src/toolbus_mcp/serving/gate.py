"""Who may call the MCP endpoint over HTTP: :class:`CallerGate`, in front of the SDK's transport.

Every request to the endpoint passes the gate before MCP sees it, the way
every request to the gateway does (:mod:`toolbus.application.identity.bearer`):

* ``Authorization: Bearer`` must be an API key of the credential table or an
  access token of the configured identity provider (``[mcp.jwt]``); no
  credential, or a bad one, is ``401`` with a ``WWW-Authenticate: Bearer``
  challenge that names the door's protected-resource metadata when it has
  one, so that an MCP client can find out how to log in, and the scopes the
  groups it asks for need (so that it asks for those, and no more);
* ``Toolbus-Groups: a,b`` (optional; absent means ``default``, as in an agent
  session) must be within the token's scopes (beyond them: ``403`` with
  ``error="insufficient_scope"`` and the scope that would do) and within the
  user's permissions (beyond them: ``403``, audited like a refused agent
  session);
* ``Toolbus-State`` (optional) is a new workflow's initial state, and must be
  an entry state (otherwise ``403``, audited); a workflow that exists keeps
  the state it reached.

A session of the 2025 revisions belongs to the credential that opened it (the
SDK's principal, which the gate sets): another caller sending its
``Mcp-Session-Id`` is answered as if it did not exist. The metadata document
and ``/healthz`` / ``/readyz`` need no credential.
Refusals are JSON, in the gateway's shape: ``error`` (a code), ``message``
(what to do) and the details of the refusal.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Collection
from typing import Any

from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Receive, Scope, Send

from toolbus._internal.web_server import SEVERAL_AUTHORIZATIONS, several_authorizations
from toolbus.application.identity.bearer import (
    Authenticator,
    AuthFailure,
    InsufficientScope,
    KeysUnavailable,
    Principal,
)
from toolbus.application.identity.credentials import bearer_token
from toolbus.domain.errors import AccessDenied, ConfigError
from toolbus_mcp.serving.server import CALLER_SCOPE_KEY, BusMcpServer, McpCaller

#: Header naming the tool groups an HTTP client asks for (comma-separated).
GROUPS_HEADER = "toolbus-groups"
#: Header naming an HTTP client's initial workflow state.
STATE_HEADER = "toolbus-state"
#: Seconds a caller waits before trying again while the identity provider's keys are missing.
KEYS_RETRY_AFTER = 10


def parse_groups(value: str | None) -> tuple[str, ...] | None:
    """``"a, b"`` as ``("a", "b")``; absent is ``None``, an empty value no groups."""
    if value is None:
        return None
    return tuple(group.strip() for group in value.split(",") if group.strip())


class CallerGate:
    """ASGI middleware: authenticate the bearer credential, admit the groups, pass the caller on.

    ``open_paths`` are served without a credential (the metadata, the health checks).
    """

    def __init__(
        self,
        app: ASGIApp,
        server: BusMcpServer,
        authenticator: Authenticator,
        *,
        open_paths: Collection[str] = (),
    ) -> None:
        self.app = app
        self.server = server
        self.authenticator = authenticator
        self.open_paths = frozenset(open_paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.open_paths:
            await self.app(scope, receive, send)
            return
        if several_authorizations(scope["headers"]):
            await refuse(
                send, 400, {"error": "several-credentials", "message": SEVERAL_AUTHORIZATIONS}
            )
            return
        headers = Headers(scope=scope)
        groups = parse_groups(headers.get(GROUPS_HEADER))
        authenticator = self.authenticator
        try:
            principal = await authenticator.authenticate_fetching(
                bearer_token(headers.get("authorization"))
            )
            principal.within(groups)
        except InsufficientScope as failure:
            await refuse(
                send,
                403,
                {
                    "error": "insufficient-scope",
                    "message": failure.message,
                    "denied_groups": list(failure.denied),
                    "scopes": list(failure.scopes),
                },
                {"www-authenticate": authenticator.challenge(failure)},
            )
            return
        except AuthFailure as failure:
            # The scopes the groups asked for need: what the client asks its provider for.
            needed = authenticator.scopes_for(groups)
            body = {"error": "unauthenticated", "message": failure.message}
            await refuse(
                send,
                401,
                {**body, "reason": failure.reason},
                {"www-authenticate": authenticator.challenge(failure, scopes=needed)},
            )
            return
        except KeysUnavailable as exc:
            retry = {"retry-after": str(KEYS_RETRY_AFTER)}
            await refuse(send, 503, {"error": "keys-unavailable", "message": str(exc)}, retry)
            return
        caller = McpCaller(principal.user, groups, headers.get(STATE_HEADER))
        try:
            self.server.admit(caller)
        except AccessDenied as exc:
            denied = {"denied_groups": list(exc.denied)}
            await refuse(send, 403, {"error": exc.error_type, "message": str(exc), **denied})
            return
        except ConfigError as exc:  # the configuration's permissions section is broken
            await refuse(send, 500, {"error": "config-error", "message": str(exc)})
            return
        scope[CALLER_SCOPE_KEY] = caller
        # The SDK's own principal: it binds a 2025 revision's session to the credential
        # that opened it, so that another caller holding its id is told it does not exist.
        scope["user"] = sdk_user(principal)
        await self.app(scope, receive, send)


@functools.lru_cache(maxsize=4096)
def sdk_user(principal: Principal) -> AuthenticatedUser:
    """The MCP SDK's view of who authenticated (made once per principal: a pydantic model)."""
    return AuthenticatedUser(
        AccessToken(
            token="",
            client_id=f"{principal.method}:{principal.credential}",
            scopes=sorted(principal.scopes),
            subject=principal.user,
        )
    )


async def refuse(
    send: Send, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> None:
    """Answer with ``body`` as JSON, before MCP sees the request."""
    raw_body = json.dumps(body).encode("utf-8")
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(raw_body)).encode()),
    ]
    raw += [(name.encode(), value.encode("latin-1")) for name, value in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": raw_body})
