"""The A2A door over HTTP: :func:`a2a_app`.

=============================================  ====================================
path                                           what
=============================================  ====================================
``GET /agents``                                the agents served, with their cards' URLs
``GET /agents/{name}/.well-known/agent-card.json``  the agent's Agent Card
``POST /agents/{name}/jsonrpc``                A2A over JSON-RPC 2.0 (SSE for streams)
``/agents/{name}/rest/...``                    A2A over HTTP+JSON (``/message:send``, ...)
``GET /.well-known/agent-card.json``           the default agent's card
``GET /.well-known/oauth-protected-resource``  the door's RFC 9728 metadata (with
                                               ``[a2a.jwt]``'s ``resource``)
=============================================  ====================================

Cards, the list and the metadata are public, as A2A has them; every other
request needs ``Authorization: Bearer`` with an API key of ``[credentials]`` or
an identity provider's access token (``[a2a.jwt]``), which names the toolbus
user the agent works for, the same way the gateway and the MCP door
authenticate (:mod:`toolbus.application.identity.bearer`). The transports are
a2a-sdk's own; the handler finds the caller's
:class:`~toolbus.application.identity.bearer.Principal` in the request's
``auth``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from a2a.server.request_handlers import RequestHandler
from a2a.server.routes import (
    create_agent_card_routes,
    create_jsonrpc_routes,
    create_rest_routes,
)
from a2a.types import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH
from starlette.applications import Starlette
from starlette.authentication import SimpleUser
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from toolbus._internal.web_server import SEVERAL_AUTHORIZATIONS, several_authorizations
from toolbus.application.identity.bearer import (
    Authenticator,
    AuthFailure,
    KeysUnavailable,
    ProtectedResource,
)
from toolbus.application.identity.credentials import bearer_token
from toolbus_a2a.serving.agents import ServedAgent
from toolbus_a2a.serving.cards import agent_path

#: Builds the handler and card of an agent the door serves.
HandlerFor = Callable[[ServedAgent], Awaitable[tuple[RequestHandler, AgentCard]]]
#: Seconds a caller waits before trying again while the identity provider's keys are missing.
KEYS_RETRY_AFTER = 10
#: Clients cache the metadata document; a changed resource is taken up within the hour.
METADATA_CACHE = "public, max-age=3600"


class Authenticated:
    """ASGI middleware: a bearer credential names the caller (``scope["auth"]``, the
    :class:`~toolbus.application.identity.bearer.Principal`; ``scope["user"]``, its
    user); a request without a valid one is refused with ``401`` and a ``Bearer``
    challenge, but for the public paths."""

    def __init__(
        self, app: ASGIApp, authenticator: Authenticator, public: Callable[[Scope], bool]
    ) -> None:
        self.app = app
        self.authenticator = authenticator
        self.public = public

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.public(scope):
            await self.app(scope, receive, send)
            return
        if several_authorizations(scope["headers"]):
            body = {"error": "several-credentials", "message": SEVERAL_AUTHORIZATIONS}
            await JSONResponse(body, status_code=400)(scope, receive, send)
            return
        authenticator = self.authenticator
        try:
            principal = await authenticator.authenticate_fetching(
                bearer_token(Headers(scope=scope).get("authorization"))
            )
        except AuthFailure as failure:
            response = JSONResponse(
                {"error": "unauthenticated", "message": failure.message, "reason": failure.reason},
                status_code=401,
                headers={"WWW-Authenticate": authenticator.challenge(failure)},
            )
            await response(scope, receive, send)
            return
        except KeysUnavailable as exc:
            response = JSONResponse(
                {"error": "keys-unavailable", "message": str(exc)},
                status_code=503,
                headers={"Retry-After": str(KEYS_RETRY_AFTER)},
            )
            await response(scope, receive, send)
            return
        scope["auth"] = principal
        scope["user"] = SimpleUser(principal.user)
        await self.app(scope, receive, send)


class AgentRoutes:
    """ASGI: the routes of the agent a request names (``/agents/{name}/...``), built when
    the agent is first asked for and again when its announcement changes."""

    def __init__(self, agents: Callable[[], dict[str, ServedAgent]], handler_for: HandlerFor):
        self.agents = agents
        self.handler_for = handler_for
        self._apps: dict[str, tuple[ServedAgent, ASGIApp]] = {}

    async def app_of(self, agent: ServedAgent) -> ASGIApp:
        built = self._apps.get(agent.name)
        if built is not None and built[0] == agent:
            return built[1]
        handler, card = await self.handler_for(agent)
        app = Starlette(
            routes=[
                *create_agent_card_routes(card, card_url=AGENT_CARD_WELL_KNOWN_PATH),
                *create_jsonrpc_routes(handler, "/jsonrpc"),
                *create_rest_routes(handler, path_prefix="/rest"),
            ]
        )
        self._apps[agent.name] = (agent, app)
        return app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        name = scope.get("path_params", {}).get("name", "")
        agents = self.agents()
        agent = agents.get(name)
        if agent is None:
            response = JSONResponse(
                {
                    "error": "no-such-agent",
                    "message": f"no agent {name!r} is served here; "
                    f"the agents are: {', '.join(sorted(agents)) or 'none yet'} (GET /agents)",
                },
                status_code=404,
            )
            await response(scope, receive, send)
            return
        await (await self.app_of(agent))(scope, receive, send)


def a2a_app(
    agents: Callable[[], dict[str, ServedAgent]],
    handler_for: HandlerFor,
    authenticator: Authenticator,
    *,
    public_url: str,
    default: str | None = None,
) -> ASGIApp:
    """The door's ASGI app; see the module docs. ``default``: the agent whose card is
    served at the root too (by default the only one, when one is served)."""
    routes = AgentRoutes(agents, handler_for)

    async def listing(request: Request) -> Response:
        base = public_url.rstrip("/")
        return JSONResponse(
            {
                "agents": [
                    {
                        "name": name,
                        "description": agent.profile.description,
                        "card": f"{base}{agent_path(name)}{AGENT_CARD_WELL_KNOWN_PATH}",
                    }
                    for name, agent in sorted(agents().items())
                ]
            }
        )

    async def default_card(scope: Scope, receive: Receive, send: Send) -> None:
        found = agents()
        name = default if default is not None else (next(iter(found)) if len(found) == 1 else None)
        agent = None if name is None else found.get(name)
        if agent is None:
            response = JSONResponse(
                {
                    "error": "no-default-agent",
                    "message": "this door serves "
                    + (f"{len(found)} agents" if found else "no agent yet")
                    + ": read GET /agents for their cards, or start it with --default NAME",
                },
                status_code=404,
            )
            await response(scope, receive, send)
            return
        # The agent's own routes answer: they serve its card at this very path.
        await (await routes.app_of(agent))(scope, receive, send)

    resource = authenticator.resource
    metadata = [] if resource is None else metadata_routes(resource)
    app = Starlette(
        routes=[
            Route("/agents", listing, methods=["GET"]),
            # An ASGI endpoint (not a function): the agent's own routes answer it.
            Route(AGENT_CARD_WELL_KNOWN_PATH, _Asgi(default_card), methods=["GET"]),
            *metadata,
            Mount("/agents/{name}", app=routes),
        ]
    )
    open_paths = frozenset(route.path for route in metadata)

    def public(scope: Scope) -> bool:
        path = str(scope.get("path", ""))
        if path in open_paths:
            return True
        return scope.get("method") == "GET" and (
            path == "/agents" or path.endswith(AGENT_CARD_WELL_KNOWN_PATH)
        )

    return Authenticated(app, authenticator, public)


def metadata_routes(resource: ProtectedResource) -> list[Route]:
    """The door's RFC 9728 document: anyone may read it (a client reads it before it has
    a token), from any origin."""
    document = resource.document()
    cors = {
        "Access-Control-Allow-Origin": "*",
        "Access-Control-Allow-Methods": "GET, OPTIONS",
        "Access-Control-Allow-Headers": "*",
    }

    async def metadata(request: Request) -> Response:
        if request.method == "OPTIONS":
            return Response(status_code=204, headers=cors)
        return JSONResponse(document, headers={"Cache-Control": METADATA_CACHE, **cors})

    return [Route(path, metadata, methods=["GET", "OPTIONS"]) for path in resource.metadata_paths]


class _Asgi:
    """An ASGI callable that Starlette's routing passes the raw request to."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
