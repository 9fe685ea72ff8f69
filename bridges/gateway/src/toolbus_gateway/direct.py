"""The two busiest routes, answered before FastAPI's router: :class:`DirectRoutes`.

A liveness probe and a tool call are most of what a gateway serves. For them,
FastAPI's router (it matches a path against every route in turn), its
dependency injection, its response building and the middleware stack cost more
per request than the gateway's own work. The gateway's ASGI app
(:class:`~toolbus_gateway.app.GatewayApp`) therefore answers an ordinary

* ``GET /healthz``, and
* ``POST /v1/tools/{name}/call`` with a JSON body of a declared length within
  ``max-body-bytes``, a credential that authenticates and a body that validates,

itself, with the same code the FastAPI routes run (the one-call session, the
answer's JSON, the error answers, the security headers, the request counter),
and hands every other request to FastAPI. FastAPI's routes still describe
both in the OpenAPI document and answer what is not ordinary (no credential,
bad JSON, a chunked body, ...) exactly as before: nothing has happened when a
request is handed on, since the credential was checked without counting a
failure and the body is given to FastAPI again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from pydantic import ValidationError
from starlette.types import Message, Receive, Scope, Send

from toolbus.application.identity.bearer import AuthFailure
from toolbus.application.identity.credentials import bearer_token
from toolbus_gateway.call_answers import answer_call
from toolbus_gateway.gateway import Gateway
from toolbus_gateway.models import CallRequest
from toolbus_gateway.preference import Preference
from toolbus_gateway.security_headers import SECURITY_HEADERS

HEALTHZ = "/healthz"
#: A tool call's path is ``/v1/tools/`` + name + ``/call``; the counter's label is the template.
CALL_PREFIX, CALL_SUFFIX, CALL_ROUTE = "/v1/tools/", "/call", "/v1/tools/{name}/call"
JSON = b"application/json"
_JSON_HEADER = (b"content-type", JSON)
_TEXT_HEADER = (b"content-type", b"text/plain; charset=utf-8")

#: Answers an unexpected failure: the failure itself goes to the log.
ErrorAnswer = Callable[[Gateway, Exception], Any]


class DirectRoutes:
    """Answers ``/healthz`` and ordinary tool calls; see the module docs.

    ``error_answer`` turns an exception a route lets through into its answer
    (a Starlette response), or None for an unexpected failure.
    """

    def __init__(self, gateway: Gateway, error_answer: ErrorAnswer) -> None:
        self.gateway = gateway
        self._error_answer = error_answer
        # Children of toolbus_gateway_http_requests_total, by (route, status): looking a
        # child up by its label values takes a lock and builds a key on every request.
        self._counted: dict[tuple[str, int], Any] = {}

    def match(self, scope: Scope) -> str | None:
        """``HEALTHZ``, a tool's name (a call), or None (FastAPI's request)."""
        path: str = scope["path"]
        if path == HEALTHZ:
            return HEALTHZ if scope["method"] == "GET" else None
        if (
            path.startswith(CALL_PREFIX)
            and path.endswith(CALL_SUFFIX)
            and scope["method"] == "POST"
            and not scope.get("root_path")
        ):
            name = path[len(CALL_PREFIX) : -len(CALL_SUFFIX)]
            if name and "/" not in name:
                return name
        return None

    async def healthz(self, send: Send) -> None:
        gateway = self.gateway
        body = orjson.dumps(
            {"status": "ok", "uptime_seconds": round(gateway.clock() - gateway.started, 3)}
        )
        await self._send(send, HEALTHZ, 200, body, [_JSON_HEADER])

    async def call(self, scope: Scope, receive: Receive, send: Send, name: str) -> Receive | None:
        """Answer the call, or hand it on: the ``receive`` FastAPI reads the request with."""
        gateway = self.gateway
        declared = authorization = None
        json_body = False
        prefer: list[str] = []
        for header, value in scope["headers"]:
            if header == b"content-length":
                declared = value
            elif header == b"content-type":
                json_body = value.startswith(JSON)
            elif header == b"authorization":
                authorization = value
            elif header == b"prefer":
                prefer.append(value.decode("latin-1"))
        if not json_body or declared is None or authorization is None:
            return receive
        try:
            if int(declared) > gateway.settings.max_body_bytes:
                return receive
            caller = gateway.authenticator.authenticate(
                bearer_token(authorization.decode("latin-1"))
            )
        except (ValueError, AuthFailure):
            return receive  # FastAPI answers it (and counts the failure)
        raw = await _read_body(receive)
        if raw is None:
            return None  # the client left
        if b"NaN" in raw or b"Infinity" in raw:
            # pydantic reads these, JSON has no such numbers: FastAPI's route refuses them
            # (a string holding the word only takes the longer way).
            return _replay(raw, receive)
        try:
            body = CallRequest.model_validate_json(raw)
        except ValidationError:
            return _replay(raw, receive)
        try:
            answer = await answer_call(
                gateway,
                caller,
                name,
                body.arguments,
                body.groups,
                body.state,
                Preference.of(prefer),
                body.can_answer,
            )
        except Exception as exc:
            answer = self._error_answer(gateway, exc)
            if answer is None:
                await self._send(
                    send,
                    CALL_ROUTE,
                    500,
                    b"Internal Server Error",
                    [(b"content-type", b"text/plain")],
                )
                raise
            await self._send(send, CALL_ROUTE, answer.status_code, answer.body, answer.raw_headers)
            return None
        await self._send(send, CALL_ROUTE, answer.status, answer.body, answer.headers)
        return None

    async def _send(
        self, send: Send, route: str, status: int, body: bytes, headers: list[tuple[bytes, bytes]]
    ) -> None:
        if not any(name == b"content-length" for name, _ in headers):
            headers = [(b"content-length", str(len(body)).encode()), *headers]
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [*headers, *SECURITY_HEADERS],
            }
        )
        counted = self._counted.get((route, status))
        if counted is None:
            counted = self._counted[route, status] = self.gateway.metrics.requests.labels(
                route, str(status)
            )
        counted.inc()
        await send({"type": "http.response.body", "body": body})


async def _read_body(receive: Receive) -> bytes | None:
    """The whole body, or None when the client disconnected first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the body read already, then what the client sends next."""
    given = False

    async def replayed() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed
