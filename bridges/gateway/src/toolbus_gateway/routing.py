"""What every ``/v1`` route shares: strict JSON bodies, and the error answers it documents.

Python's ``json`` reads ``NaN`` and ``Infinity``, which are not JSON, and fails on
invalid UTF-8, very deep nesting or numbers of thousands of digits with errors
FastAPI answers in a shape of its own. :class:`StrictJsonRoute` reads bodies so
that each of these is a ``400 bad-json`` like any other malformed body, in the
``{error, message}`` shape the gateway answers every error with; the OpenAPI
document says so for every operation (:data:`ERROR_ANSWERS`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, NoReturn

from fastapi import APIRouter, Request, Response, params
from fastapi.routing import APIRoute
from starlette.routing import Match

from toolbus_gateway.models import ErrorAnswer


def _not_json(constant: str) -> NoReturn:
    raise ValueError(f"{constant} is not a JSON number")


def strict_json(body: bytes) -> Any:
    """``body`` as JSON, or :class:`json.JSONDecodeError` saying what is wrong with it."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise json.JSONDecodeError("the body is not UTF-8", "", exc.start) from exc
    try:
        return json.loads(text, parse_constant=_not_json)
    except json.JSONDecodeError:
        raise
    except RecursionError as exc:
        raise json.JSONDecodeError("the body nests too deeply", text, 0) from exc
    except ValueError as exc:  # NaN and Infinity; integers past Python's digit limit
        reason = str(exc) if "JSON number" in str(exc) else "a number has too many digits"
        raise json.JSONDecodeError(reason, text, 0) from exc


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = strict_json(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A route whose JSON body is read by :func:`strict_json`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict


def _error(description: str) -> dict[str, Any]:
    return {"model": ErrorAnswer, "description": description}


#: The error answers any ``/v1`` operation may give (docs/gateway.md lists the types).
ERROR_ANSWERS: dict[int | str, dict[str, Any]] = {
    400: _error("The body is not JSON (bad-json)"),
    401: _error("No credential, or one that is not valid (unauthenticated)"),
    403: _error("Groups or state refused, or a hook denied the call"),
    404: _error("No such tool, session, approval or task for this caller"),
    409: _error(
        "Not possible now: a session that exists, a tool not offered in this state, a task "
        "that ended or asks nothing"
    ),
    413: _error("The body is larger than max-body-bytes"),
    422: _error(
        "The body or a parameter does not match its schema (bad-request), or answers do not "
        "fit a task's questions (unfit-answers)"
    ),
    429: _error("A per-user limit was reached; Retry-After says when to try again"),
    503: _error(
        "The broker or the state store cannot serve the call now (unavailable; down says "
        "which); Retry-After says when to try again"
    ),
}

#: One Server-Sent Event as a reader of the stream sees it; ``data`` is JSON text.
SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "event": {"type": "string"},
        "data": {"type": "string"},
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}

#: The answers of an operation that streams Server-Sent Events: the stream, and the
#: same error answers, which are JSON although the stream is not (FastAPI would
#: give a model the route's media type, hence the schema named outright).
EVENT_STREAM: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "Server-Sent Events",
        "content": {"text/event-stream": {"schema": SSE_EVENT}},
    },
    **{
        status: {
            "description": answer["description"],
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ErrorAnswer"}}
            },
        }
        for status, answer in ERROR_ANSWERS.items()
    },
}


def _json(description: str, *schemas: str) -> dict[str, Any]:
    refs = [{"$ref": f"#/components/schemas/{name}"} for name in schemas]
    schema = refs[0] if len(refs) == 1 else {"anyOf": refs}
    return {"description": description, "content": {"application/json": {"schema": schema}}}


#: The answers of a single call that did not succeed: the call's outcome, or (for
#: groups or a state refused before any call) an error answer.
CALL_REFUSED: dict[int | str, dict[str, Any]] = {
    403: _json(
        "Groups or state refused (an error answer), or a code hook denied the call (the outcome)",
        "CallOutcomeView",
        "ErrorAnswer",
    ),
    404: _json("No such tool offered to the caller", "CallOutcomeView", "ErrorAnswer"),
    409: _json("Not offered in this state", "CallOutcomeView", "ErrorAnswer"),
    422: _json(
        "The service refused the arguments (the outcome), or the body does not match its "
        "schema (an error answer)",
        "CallOutcomeView",
        "ErrorAnswer",
    ),
    429: _json(
        "A rate limit ([[limits]]) or a spent budget ([[budgets]]) refused the call; "
        "Retry-After says when it may pass",
        "ErrorAnswer",
    ),
    502: _json("The tool failed", "CallOutcomeView"),
}


#: The answer of a call that runs as a task: the task, and where to read it.
CALL_AS_TASK: dict[int | str, dict[str, Any]] = {
    202: {
        **_json(
            "The call runs as a task (asked for with Prefer: respond-async, required by its "
            "tool, or waiting for a person longer than approval-wait): read it at Location",
            "TaskView",
        ),
        "headers": {
            "Location": {"description": "/v1/tasks/{id}", "schema": {"type": "string"}},
            "Preference-Applied": {
                "description": "respond-async, when it was asked for",
                "schema": {"type": "string"},
            },
        },
    },
    503: {
        **_json(
            "The broker could not serve the call, or the gateway stopped before the call was "
            "made (unavailable)",
            "ErrorAnswer",
        )
    },
}


class EventStreamAnswer(Response):
    """Declares ``text/event-stream`` in the OpenAPI document (the route answers an SSE stream)."""

    media_type = "text/event-stream"


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at the request's path (for a 405's ``Allow``).

    Starlette names only the first route that matches the path, where two routes
    (``GET`` and ``DELETE`` of one resource) may; so each method is tried.
    """
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] == Match.FULL for route in request.app.routes):
            allowed.append(method)
    return allowed


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def v1_router(dependencies: Sequence[params.Depends] = ()) -> APIRouter:
    """A router for ``/v1`` operations: strict JSON, documented errors."""
    return APIRouter(
        prefix="/v1",
        route_class=StrictJsonRoute,
        responses=ERROR_ANSWERS,
        dependencies=list(dependencies),
    )
