"""Request bodies beyond a size answer 413 before the app reads them whole."""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """ASGI middleware: refuse bodies larger than ``max_bytes`` with 413.

    A declared ``Content-Length`` over the limit is refused at once; a body
    sent without one (chunked) is counted as it arrives and refused as soon as
    it passes the limit, so a huge body is never held in memory.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    await _refuse(send, 400, "bad-request", "Content-Length is not a number")
                    return
                if declared > self.max_bytes:
                    await _refuse(send, 413, "body-too-large", self._message(declared))
                    return
        seen = 0
        started = refused = False

        async def counted() -> Message:
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes and not started:
                    # Answer now and tell the app the client left: frameworks turn an
                    # exception raised while reading the body into a 400 of their own.
                    refused = True
                    await _refuse(send, 413, "body-too-large", self._message(None))
                    return {"type": "http.disconnect"}
            return message

        async def tracked(message: Message) -> None:
            nonlocal started
            if refused:
                return
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except Exception:
            if not refused:
                raise

    def _message(self, declared: int | None) -> str:
        size = "" if declared is None else f" ({declared} bytes)"
        return (
            f"the request body{size} is larger than this gateway accepts "
            f"({self.max_bytes} bytes, max-body-bytes in [gateway]); send less"
        )


async def _refuse(send: Send, status: int, error: str, message: str) -> None:
    body = json.dumps({"error": error, "message": message}).encode()
    headers: list[tuple[bytes, bytes]] = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    start: dict[str, Any] = {"type": "http.response.start", "status": status, "headers": headers}
    await send(start)
    await send({"type": "http.response.body", "body": body})
