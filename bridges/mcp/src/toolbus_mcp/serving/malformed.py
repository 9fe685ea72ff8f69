"""Malformed HTTP requests to the MCP endpoint answered with JSON-RPC errors, not silence.

The SDK's streamable HTTP transport takes a request whose ``id`` is not a
string or an integer (an object, an array, a float, a boolean, ``null``) for
a notification and answers ``202`` with no body, so the client waits for an
answer that never comes; a body over its size limit and a body that is not
``application/json`` get plain-text errors. :class:`MalformedRequests` sits in
front of it and answers each of these with the protocol's error object
(``mcp_types.JSONRPCError``, ``id: null``), at the HTTP status the transport
would use; everything else passes through unchanged, body included.
"""

from __future__ import annotations

from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

import mcp_types as mcp
import pydantic_core
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_JSON = "application/json"


class MalformedRequests:
    """ASGI middleware for the MCP endpoint; ``max_body`` bytes at most per request."""

    def __init__(self, app: ASGIApp, *, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if content_type != _JSON:
            await _answer(
                send,
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                mcp.INVALID_REQUEST,
                "Content-Type must be application/json",
            )
            return
        body = await self._body(headers, receive)
        if body is None:
            await _answer(
                send,
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                mcp.INVALID_REQUEST,
                f"the request body is larger than {self.max_body:,} bytes",
            )
            return
        try:
            # JSON has no NaN or Infinity; Python's readers take them unless told not to.
            message = pydantic_core.from_json(body, allow_inf_nan=False)
        except ValueError:
            await _answer(send, HTTPStatus.BAD_REQUEST, mcp.PARSE_ERROR, "Parse error")
            return
        problem = _id_problem(message)
        if problem is not None:
            await _answer(send, HTTPStatus.BAD_REQUEST, mcp.INVALID_REQUEST, problem)
            return
        await self.app(scope, _replay(body, receive), send)

    async def _body(self, headers: Headers, receive: Receive) -> bytes | None:
        """The whole body, or None when it is larger than ``max_body`` (then not read on)."""
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_body:
            return None
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            body += message.get("body", b"")
            if len(body) > self.max_body:
                return None
            if not message.get("more_body", False):
                break
        return bytes(body)


def _id_problem(message: Any) -> str | None:
    """Why a message's ``id`` is not one JSON-RPC allows (a string or an integer), if so."""
    if not isinstance(message, Mapping) or "id" not in message:
        return None  # a notification, or not one message: the transport says what is wrong
    given = message["id"]
    if isinstance(given, str) or (isinstance(given, int) and not isinstance(given, bool)):
        return None
    kind = "null" if given is None else type(given).__name__
    return f"Invalid Request: the id must be a string or an integer, not {kind}"


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that hands over the body read already, then the connection's own messages."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _answer(send: Send, status: HTTPStatus, code: int, message: str) -> None:
    error = mcp.JSONRPCError(
        jsonrpc="2.0", id=None, error=mcp.ErrorData(code=code, message=message)
    )
    body = error.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
    headers = [(b"content-type", _JSON.encode()), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": int(status), "headers": headers})
    await send({"type": "http.response.body", "body": body})
