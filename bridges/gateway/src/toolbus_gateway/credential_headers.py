"""One caller per request: more than one ``Authorization`` header is answered 400."""

from __future__ import annotations

import json

from starlette.types import ASGIApp, Receive, Scope, Send

from toolbus._internal.web_server import SEVERAL_AUTHORIZATIONS, several_authorizations

_BODY = json.dumps({"error": "several-credentials", "message": SEVERAL_AUTHORIZATIONS}).encode()


class OneCredential:
    """ASGI middleware: refuse a request that has several ``Authorization`` headers.

    It sits inside FastAPI's middleware (so the answer is counted and has the
    security headers); the gateway's direct routes leave such a request to it.
    No route is ever left to pick one of the headers.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and several_authorizations(scope["headers"]):
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(_BODY)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": _BODY})
            return
        await self.app(scope, receive, send)
