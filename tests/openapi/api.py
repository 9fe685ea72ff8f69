"""A small real HTTP API for the OpenAPI toolset tests: Starlette under uvicorn, on 127.0.0.1.

It serves its own OpenAPI 3.1 document at ``/openapi.json`` and records every
request it receives (method, raw path, query, headers), so that a test can say
what reached the API and what never did. :func:`elsewhere_app` is a second API,
run on another port: "another host" for redirects.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import (
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route

from tests.support.servers import LOOPBACK


@dataclass
class Hit:
    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes
    #: Every header as sent, repeats included (names lower-cased).
    header_list: list[tuple[str, str]] = field(default_factory=list)


@dataclass
class Recorder:
    hits: list[Hit] = field(default_factory=list)
    #: Set when a client stops reading a dripping answer (it hung up).
    hung_up: threading.Event = field(default_factory=threading.Event)

    async def record(self, request: Request) -> None:
        self.hits.append(
            Hit(
                request.method,
                request.scope["raw_path"].decode("latin-1"),
                request.url.query,
                dict(request.headers),
                await request.body(),
                [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.scope["headers"]],
            )
        )


def document(secured: bool = True) -> dict[str, Any]:
    """The API's own OpenAPI 3.1 document."""
    item = {
        "type": "object",
        "required": ["name"],
        "properties": {
            "id": {"type": "integer", "readOnly": True},
            "name": {"type": "string", "description": "What the item is called"},
            "price": {"type": "number", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
    }
    item_id = {
        "name": "item_id",
        "in": "path",
        "required": True,
        "description": "The item's id",
        "schema": {"type": "string"},
    }

    def get(operation_id: str, summary: str, **extra: Any) -> dict[str, Any]:
        return {"get": {"operationId": operation_id, "summary": summary, **extra}}

    return {
        "openapi": "3.1.0",
        "info": {"title": "Shop", "version": "1.0"},
        "servers": [{"url": "/api"}],
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": "List items",
                    "tags": ["items"],
                    "parameters": [
                        {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                        {
                            "name": "tag",
                            "in": "query",
                            "schema": {"type": "array", "items": {"type": "string"}},
                        },
                    ],
                },
                "post": {
                    "operationId": "createItem",
                    "summary": "Create an item",
                    "tags": ["items"],
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/json": {"schema": {"$ref": "#/components/schemas/Item"}}
                        },
                    },
                },
            },
            "/items/{item_id}": {
                "parameters": [{"$ref": "#/components/parameters/ItemId"}],
                **get("getItem", "Get one item", tags=["items"]),
            },
            "/headers": get(
                "showHeaders",
                "Show the request's headers",
                parameters=[
                    {"name": "X-Trace-Tag", "in": "header", "schema": {"type": "string"}},
                ],
            ),
            "/notes": {
                "post": {
                    "operationId": "addNote",
                    "requestBody": {"content": {"text/plain": {"schema": {"type": "string"}}}},
                }
            },
            "/login": {
                "post": {
                    "operationId": "logIn",
                    "requestBody": {
                        "required": True,
                        "content": {
                            "application/x-www-form-urlencoded": {
                                "schema": {
                                    "type": "object",
                                    "required": ["user"],
                                    "properties": {
                                        "user": {"type": "string"},
                                        "remember": {"type": "boolean"},
                                    },
                                }
                            }
                        },
                    },
                }
            },
            "/whoami": get(
                "whoAmI",
                "Who the API thinks the caller is",
                parameters=[{"name": "api_key", "in": "query", "schema": {"type": "string"}}],
            ),
            "/slow": get(
                "slow",
                "Answer after a while",
                parameters=[{"name": "seconds", "in": "query", "schema": {"type": "number"}}],
            ),
            "/search": get(
                "searchItems",
                "Search items of a tenant",
                parameters=[
                    {"name": "q", "in": "query", "schema": {"type": "string"}},
                    {"name": "tenant", "in": "query", "schema": {"type": "string"}},
                    {"name": "limit", "in": "query", "schema": {"type": "integer"}},
                    {
                        "name": "filter",
                        "in": "query",
                        "style": "form",
                        "explode": True,
                        "schema": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                    },
                ],
            ),
            "/keyed": get(
                "keyedHeaders",
                "Show the API key headers received",
                parameters=[{"name": "x-api-key", "in": "header", "schema": {"type": "string"}}],
            ),
            "/drip": get("drip", "An answer that arrives a byte at a time, slowly"),
            "/leaky": get(
                "leaky",
                "An answer that quotes the credential at a given offset",
                parameters=[
                    {"name": "at", "in": "query", "schema": {"type": "integer"}},
                    {"name": "status", "in": "query", "schema": {"type": "integer"}},
                ],
            ),
            "/redirect/outside": get("redirectOutside", "Redirect outside the API's base path"),
            "/big": get("big", "A very long answer"),
            "/broken": get("broken", "Always fails"),
            "/redirect/home": get("redirectHome", "Redirect to item 1 on this API"),
            "/redirect/away": get("redirectAway", "Redirect to another host"),
        },
        "components": {
            "schemas": {"Item": item},
            "parameters": {"ItemId": item_id},
        },
        **({"security": [{"bearer": []}]} if secured else {}),
    }


def app(recorder: Recorder, elsewhere: str, secret: str) -> Starlette:
    """The API; ``elsewhere`` is the other host's base URL, ``secret`` the credential it wants."""

    def authorized(request: Request) -> str | None:
        bearer = request.headers.get("authorization", "")
        for candidate in (
            bearer.removeprefix("Bearer ") if bearer.startswith("Bearer ") else None,
            request.headers.get("x-api-key"),
            request.query_params.get("api_key"),
        ):
            if candidate:
                return candidate
        return None

    async def items(request: Request) -> Response:
        await recorder.record(request)
        if request.method == "POST":
            body = json.loads(await request.body())
            return JSONResponse({"id": 7, **body}, status_code=201)
        return JSONResponse(
            {
                "limit": request.query_params.get("limit"),
                "tags": request.query_params.getlist("tag"),
                "items": [{"id": 1, "name": "kettle"}],
            }
        )

    async def item(request: Request) -> Response:
        await recorder.record(request)
        item_id = request.path_params["item_id"]
        if item_id == "404":
            return JSONResponse({"error": "no such item", "id": item_id}, status_code=404)
        return JSONResponse({"id": item_id, "name": "kettle", "note": "caf\u00e9"})

    async def headers(request: Request) -> Response:
        await recorder.record(request)
        return JSONResponse({"x-trace-tag": request.headers.get("x-trace-tag")})

    async def whoami(request: Request) -> Response:
        await recorder.record(request)
        given = authorized(request)
        if given != secret:
            return JSONResponse({"error": "who are you?"}, status_code=401)
        # Echoes the credential, as careless APIs do: it must still never be seen.
        return JSONResponse({"user": "alice", "credential": given})

    async def slow(request: Request) -> Response:
        await recorder.record(request)
        await asyncio.sleep(float(request.query_params.get("seconds", "0")))
        return PlainTextResponse("finally")

    async def search(request: Request) -> Response:
        await recorder.record(request)
        return JSONResponse({"query": request.url.query})

    async def keyed(request: Request) -> Response:
        await recorder.record(request)
        return JSONResponse({"x-api-key": request.headers.getlist("x-api-key")})

    async def drip(request: Request) -> Response:
        await recorder.record(request)

        async def trickle() -> AsyncIterator[bytes]:
            try:
                for _ in range(6000):
                    yield b"."
                    await asyncio.sleep(0.05)
            finally:  # the client went away (or the server stops)
                recorder.hung_up.set()

        return StreamingResponse(trickle(), media_type="text/plain")

    async def leaky(request: Request) -> Response:
        await recorder.record(request)
        at = int(request.query_params.get("at", "0"))
        status = int(request.query_params.get("status", "500"))
        text = "x" * at + f"token={authorized(request)}" + " tail" * 400
        return PlainTextResponse(text, status_code=status)

    async def redirect_outside(request: Request) -> Response:
        await recorder.record(request)
        return RedirectResponse("/outside/collect", status_code=302)

    async def outside(request: Request) -> Response:
        await recorder.record(request)
        return PlainTextResponse("outside the API")

    async def big(request: Request) -> Response:
        await recorder.record(request)
        return PlainTextResponse("x" * 200_000)

    async def broken(request: Request) -> Response:
        await recorder.record(request)
        return PlainTextResponse("database on fire " * 400, status_code=500)

    async def redirect_home(request: Request) -> Response:
        await recorder.record(request)
        return RedirectResponse("/api/items/1", status_code=302)

    async def redirect_away(request: Request) -> Response:
        await recorder.record(request)
        return RedirectResponse(f"{elsewhere}/collect", status_code=302)

    async def echo_body(request: Request) -> Response:
        await recorder.record(request)
        return PlainTextResponse(
            f"{request.headers.get('content-type')}: {(await request.body()).decode()}"
        )

    async def openapi(request: Request) -> Response:
        return JSONResponse(document())

    return Starlette(
        routes=[
            Route("/openapi.json", openapi),
            Route("/api/items", items, methods=["GET", "POST"]),
            Route("/api/items/{item_id}", item),
            Route("/api/headers", headers),
            Route("/api/notes", echo_body, methods=["POST"]),
            Route("/api/login", echo_body, methods=["POST"]),
            Route("/api/whoami", whoami),
            Route("/api/slow", slow),
            Route("/api/search", search),
            Route("/api/keyed", keyed),
            Route("/api/drip", drip),
            Route("/api/leaky", leaky),
            Route("/api/redirect/outside", redirect_outside),
            Route("/outside/collect", outside),
            Route("/api/big", big),
            Route("/api/broken", broken),
            Route("/api/redirect/home", redirect_home),
            Route("/api/redirect/away", redirect_away),
        ]
    )


def elsewhere_app(recorder: Recorder) -> Starlette:
    async def collect(request: Request) -> Response:
        await recorder.record(request)
        return PlainTextResponse("you reached another host")

    return Starlette(routes=[Route("/collect", collect)])


class _Server(uvicorn.Server):
    """A uvicorn server that says when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@contextmanager
def uvicorn_serving(application: Starlette) -> Iterator[str]:
    """Serve ``application`` on 127.0.0.1 and a free port, in a thread; yields its base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((LOOPBACK, 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        application, log_level="warning", lifespan="off", timeout_graceful_shutdown=1
    )
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        if not server.listening.wait(30):
            raise RuntimeError("uvicorn did not start within 30 s")
        yield f"http://{LOOPBACK}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


class _Forgetful(Recorder):
    async def record(self, request: Request) -> None:
        return None


def benchmark_app() -> Starlette:
    """The API for benchmarks (``uvicorn --factory``): it records nothing."""
    return app(_Forgetful(), "http://127.0.0.1:9", "unused")
