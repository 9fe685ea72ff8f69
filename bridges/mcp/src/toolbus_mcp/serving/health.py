"""``/healthz`` (the process answers) and ``/readyz`` (it can serve now, and why not) over HTTP.

The same checks as the gateway's, for the same load balancers: the broker
connection, the configuration, and, when tokens are signed with an identity
provider's keys, whether those keys are at hand (a provider that cannot be
reached is said here while the last good keys still serve).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from toolbus.application.identity.bearer import Authenticator
from toolbus_mcp.serving.server import BusMcpServer

HEALTHZ = "/healthz"
READYZ = "/readyz"


def health_routes(server: BusMcpServer, authenticator: Authenticator) -> list[Route]:
    """The two routes, for the HTTP app."""

    async def healthz(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def readyz(request: Request) -> JSONResponse:
        checks: dict[str, str] = {}
        bus = server.door.tools.client.bus
        connected = bool(getattr(bus, "is_connected", True))
        checks["broker"] = "connected" if connected else "disconnected; reconnecting"
        registry = server.door.tools.registry
        checks["config"] = f"loaded: {len(registry.tools)} tools, {len(registry.services)} services"
        checks.update(authenticator.readiness())
        ready = connected and authenticator.ready
        return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)

    return [Route(HEALTHZ, healthz, methods=["GET"]), Route(READYZ, readyz, methods=["GET"])]
