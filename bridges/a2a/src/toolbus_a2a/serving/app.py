"""The A2A door over HTTP: :func:`a2a_app`.

=============================================  ====================================
path                                           what
=============================================  ====================================
``GET /agents``                                the agents served, with their cards' URLs
``GET /agents/{name}/.well-known/agent-card.json``  the agent's Agent Card
``POST /agents/{name}/jsonrpc``                A2A over JSON-RPC 2.0 (SSE for streams)
``/agents/{name}/rest/...``                    A2A over HTTP+JSON (``/message:send``, ...)
``GET /.well-known/agent-card.json``           the default agent's card
=============================================  ====================================

Cards and the list are public, as A2A has them; every other request needs
``Authorization: Bearer KEY`` with an API key of ``[credentials]``, which names
the toolbus user the agent works for. The transports are a2a-sdk's own.
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

from toolbus.application.identity.credentials import CredentialTable, bearer_token
from toolbus_a2a.serving.agents import ServedAgent
from toolbus_a2a.serving.cards import agent_path

#: Builds the handler and card of an agent the door serves.
HandlerFor = Callable[[ServedAgent], Awaitable[tuple[RequestHandler, AgentCard]]]


class Authenticated:
    """ASGI middleware: a bearer API key names the caller (``scope["user"]``); requests
    without one are refused with ``401``, but for the public cards and the agents list."""

    def __init__(self, app: ASGIApp, credentials: CredentialTable) -> None:
        self.app = app
        self.credentials = credentials

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or _public(scope):
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        identity = self.credentials.authenticate(bearer_token(headers.get("authorization")))
        if identity is None:
            response = JSONResponse(
                {
                    "error": "unauthenticated",
                    "message": "a valid bearer token is required: send Authorization: Bearer "
                    "KEY with an API key of the door's [credentials]",
                },
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="toolbus"'},
            )
            await response(scope, receive, send)
            return
        scope["user"] = SimpleUser(identity.user)
        await self.app(scope, receive, send)


def _public(scope: Scope) -> bool:
    path = str(scope.get("path", ""))
    return scope.get("method") == "GET" and (
        path == "/agents" or path.endswith(AGENT_CARD_WELL_KNOWN_PATH)
    )


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
    credentials: CredentialTable,
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

    app = Starlette(
        routes=[
            Route("/agents", listing, methods=["GET"]),
            # An ASGI endpoint (not a function): the agent's own routes answer it.
            Route(AGENT_CARD_WELL_KNOWN_PATH, _Asgi(default_card), methods=["GET"]),
            Mount("/agents/{name}", app=routes),
        ]
    )
    return Authenticated(app, credentials)


class _Asgi:
    """An ASGI callable that Starlette's routing passes the raw request to."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)
