"""``/asyncapi.json``: the AsyncAPI 3.0 document of the deployment the gateway serves.

Built from the gateway's live configuration (what ``toolbus asyncapi --live``
would write) and the broker it is connected to, on each request.
It lists every tool and queue, whatever the caller's groups, so it is for
operators: a bearer credential of a console user, or, at
``/console/asyncapi.json`` (the link on the console page), the console's
login cookie.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse

from toolbus.application.calls.advertising import toolbus_version
from toolbus.application.identity.bearer import Principal
from toolbus.domain.asyncapi.document import asyncapi_document
from toolbus.plugins import asyncapi_broker
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.http_auth import console_caller, gateway_of

router = APIRouter(tags=["operators"])
Operator = Annotated[Principal, Depends(console_caller)]
#: Where the console links the document (its cookie is sent to /console paths only).
CONSOLE_PATH = "/console/asyncapi.json"


@router.get(
    "/asyncapi.json",
    summary="The deployment's AsyncAPI 3.0 document (operators only)",
    responses={403: {"description": "The caller is not a console operator"}},
)
async def asyncapi(request: Request, caller: Operator) -> JSONResponse:
    """Channels, operations and messages of every tool service the gateway knows."""
    return JSONResponse(document_of(gateway_of(request)))


@router.get(CONSOLE_PATH, include_in_schema=False)
async def console_asyncapi(request: Request, caller: Operator) -> JSONResponse:
    return JSONResponse(document_of(gateway_of(request)))


def document_of(gateway: Gateway) -> dict[str, Any]:
    """The document of ``gateway``'s current configuration (a few milliseconds to make)."""
    broker = gateway.broker
    described = asyncapi_broker(broker, gateway.broker_options) if isinstance(broker, str) else None
    return asyncapi_document(
        gateway.registry, described, title="toolbus gateway deployment", version=toolbus_version()
    )
