"""Header values as HTTP defines them, whichever parser uvicorn runs.

RFC 9110 (section 5.5): the whitespace around a field value is not part of
it. uvicorn's ``h11`` parser drops it, its ``httptools`` parser (the one used
when installed) keeps trailing spaces and tabs, so ``Mcp-Method: tools/call ``
would not match its body, nor a bearer key with a space after it its table.
:class:`HttpFieldValues` trims every header value once, before anything reads
them (the caller gate, the transport's header checks).
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

#: What RFC 9110 calls optional whitespace: spaces and horizontal tabs.
_OWS = b" \t"


class HttpFieldValues:
    """ASGI middleware: the header values of an HTTP request without surrounding whitespace."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = scope["headers"]
            if any(value != value.strip(_OWS) for _, value in headers):
                scope = {**scope, "headers": [(name, value.strip(_OWS)) for name, value in headers]}
        await self.app(scope, receive, send)
