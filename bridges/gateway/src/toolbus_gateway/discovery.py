"""``/.well-known/oauth-protected-resource``: how OAuth clients find out how to log in.

Served when ``[gateway.jwt]`` names the gateway's ``resource``: the RFC 9728
document (:class:`~toolbus.application.identity.bearer.resource.ProtectedResource`)
at the well-known path, and, for a resource with a path, at the well-known
path followed by it. Anyone may read it (it holds nothing secret, and a
client reads it before it has a token), from any origin.
"""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse, Response

from toolbus.application.identity.bearer import ProtectedResource

#: Clients cache the document; a changed resource is taken up within the hour.
CACHE_CONTROL = "public, max-age=3600"
_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
    "Access-Control-Allow-Headers": "*",
}


def metadata_router(resource: ProtectedResource) -> APIRouter:
    """The routes that serve ``resource``'s metadata document."""
    router = APIRouter(tags=["authentication"])
    document = resource.document()

    async def metadata() -> JSONResponse:
        return JSONResponse(document, headers={"Cache-Control": CACHE_CONTROL, **_CORS})

    async def preflight() -> Response:
        return Response(status_code=204, headers=_CORS)

    for path in resource.metadata_paths:
        router.add_api_route(
            path,
            metadata,
            methods=["GET"],
            summary="How to log in: this gateway as an OAuth protected resource (RFC 9728)",
            response_description="The protected-resource metadata",
        )
        router.add_api_route(path, preflight, methods=["OPTIONS"], include_in_schema=False)
    return router
