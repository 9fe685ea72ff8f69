"""The processes ``bench_gateway.py`` starts besides the gateway, each on its own.

::

    python -m tests.benchmarks.http_contestants service --broker URL
    python -m tests.benchmarks.http_contestants hello --port PORT
    python -m tests.benchmarks.http_contestants fastapi --port PORT --broker URL --config FILE

* ``service``: the echo tool service the calls reach, on the broker.
* ``hello``: bare uvicorn and Starlette answering ``GET /`` with a small JSON
  object; the floor of the HTTP stack.
* ``fastapi``: what a user writes by hand in ten lines: a FastAPI endpoint
  ``POST /call/{name}`` that reads ``{"arguments": {...}}`` and calls the tool
  through ``Tools.call``.

Every HTTP server here runs as ``toolbus gateway`` does: uvicorn's server on the
fastest event loop installed (uvloop when it is), its HTTP parser picked by
uvicorn (httptools when installed), access log off.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import uvicorn
from pydantic import BaseModel

from toolbus import Tools, ToolServiceClient, load_registry, running, tool_service
from toolbus._internal.event_loops import backend_options
from toolbus.plugins import connect

#: The echo service's queues; the benchmark's configuration names them.
ECHO_ID = "bench-echo"
REQUESTS = "non-persistent://bench/gateway/echo"
RESPONSES = "non-persistent://bench/gateway/echo-response"


@tool_service(ECHO_ID, request_queue=REQUESTS, response_queue=RESPONSES)
async def echo(text: str = "") -> str:
    return text


class Call(BaseModel):
    """The hand-written endpoint's request body."""

    arguments: dict[str, Any] = {}


def configuration() -> dict[str, Any]:
    """The snapshot every contestant serves: the echo tool in the default group."""
    return {
        "tool-service": {ECHO_ID: echo.descriptor()},
        "tool": {
            "echo": {
                "type": "tool-service",
                "name": "echo",
                "description": "Answers its text",
                "service": ECHO_ID,
                "arguments": [{"name": "text", "type": "string", "description": "what to say"}],
            }
        },
    }


async def serve_echo(broker: str) -> None:
    bus = await connect(broker)
    try:
        async with running(bus, echo):
            print("echo service ready", flush=True)
            await anyio.sleep_forever()
    finally:
        await bus.close()


def hello_app() -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def hello(request: Request) -> JSONResponse:
        return JSONResponse({"hello": "world"})

    return Starlette(routes=[Route("/", hello)])


def fastapi_app(broker: str, config: Path) -> Any:
    from fastapi import FastAPI

    found: dict[str, Tools] = {}
    snapshot = json.loads(config.read_text())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        bus = await connect(broker)
        try:
            async with ToolServiceClient(bus) as client:
                found["tools"] = Tools(client, load_registry(snapshot))
                yield
        finally:
            await bus.close()

    app = FastAPI(lifespan=lifespan)

    @app.post("/call/{name}")
    async def call(name: str, body: Call) -> dict[str, str]:
        return {"observation": await found["tools"].call(name, body.arguments, user="alice")}

    return app


async def serve_http(app: Any, port: int) -> None:
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", access_log=False, lifespan="on"
    )
    await uvicorn.Server(config).serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("what", choices=("service", "hello", "fastapi"))
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--broker", default="")
    parser.add_argument("--config", type=Path)
    args = parser.parse_args(argv)
    options = backend_options("auto")
    if args.what == "service":
        anyio.run(serve_echo, args.broker, backend="asyncio", backend_options=options)
    elif args.what == "hello":
        anyio.run(serve_http, hello_app(), args.port, backend="asyncio", backend_options=options)
    else:
        app = fastapi_app(args.broker, args.config)
        anyio.run(serve_http, app, args.port, backend="asyncio", backend_options=options)


if __name__ == "__main__":
    main()
