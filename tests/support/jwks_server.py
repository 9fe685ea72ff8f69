"""An identity provider's key endpoints under a test's control, served by uvicorn on 127.0.0.1.

``/jwks`` answers the keys (with the caching headers, ETag and status the test
sets), ``/.well-known/openid-configuration`` names the issuer and the keys'
URL. Every request is recorded; :meth:`JwksServer.requested` waits for the
n-th, and :attr:`JwksServer.hold` keeps answers waiting until it is set, so a
test sees requests in flight.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import uvicorn
from joserfc.jwk import ECKey, KeySet
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.support.servers import LOOPBACK, bound_socket


def es256_key(kid: str | None = None) -> ECKey:
    return ECKey.generate_key(
        "P-256", parameters={"kid": kid or f"es-{secrets.token_hex(4)}", "use": "sig"}
    )


@dataclass
class JwksServer:
    """What the endpoints answer, and what they were asked."""

    url: str
    keys: list[ECKey] = field(default_factory=lambda: [es256_key()])
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    #: Answer 304 to a request naming this ETag (and send it with the keys).
    etag: str | None = None
    #: Raw bytes to answer instead of the keys.
    body: bytes | None = None
    #: The issuer the discovery document names (default: the server's own URL).
    issuer: str | None = None
    hold: anyio.Event | None = None
    requests: list[dict[str, str]] = field(default_factory=list)
    _arrived: anyio.Event = field(default_factory=anyio.Event)

    @property
    def jwks_url(self) -> str:
        return f"{self.url}/jwks"

    def key_requests(self) -> list[dict[str, str]]:
        return [request for request in self.requests if request["path"] == "/jwks"]

    async def requested(self, count: int, *, timeout: float = 10.0) -> None:
        """Wait until ``count`` requests for the keys have arrived."""
        with anyio.fail_after(timeout):
            while len(self.key_requests()) < count:
                await self._arrived.wait()

    def _record(self, request: Request) -> None:
        self.requests.append({"path": request.url.path, **dict(request.headers)})
        arrived, self._arrived = self._arrived, anyio.Event()
        arrived.set()

    async def _jwks(self, request: Request) -> Response:
        self._record(request)
        if self.hold is not None:
            await self.hold.wait()
        headers = dict(self.headers)
        if self.etag is not None:
            headers["etag"] = self.etag
            if request.headers.get("if-none-match") == self.etag and self.status == 200:
                return Response(status_code=304, headers=headers)
        if self.body is not None:
            return Response(self.body, status_code=self.status, headers=headers)
        document: dict[str, Any] = dict(KeySet(list(self.keys)).as_dict(private=False))
        return JSONResponse(document, status_code=self.status, headers=headers)

    async def _discovery(self, request: Request) -> Response:
        self._record(request)
        return JSONResponse({"issuer": self.issuer or self.url, "jwks_uri": self.jwks_url})


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@asynccontextmanager
async def serving_jwks() -> AsyncIterator[JwksServer]:
    """A :class:`JwksServer` listening for the block (on a socket listening already)."""
    listener = bound_socket()
    port = listener.getsockname()[1]
    server = JwksServer(f"http://{LOOPBACK}:{port}")
    app = Starlette(
        routes=[
            Route("/jwks", server._jwks),
            Route("/.well-known/openid-configuration", server._discovery),
        ]
    )
    web = _Server(uvicorn.Config(app, log_level="warning"))

    async def serve() -> None:
        with listener:
            await web.serve(sockets=[listener])

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(serve)
        await web.listening.wait()
        try:
            yield server
        finally:
            if server.hold is not None:
                server.hold.set()
            web.should_exit = True
