"""A real gateway for tests: uvicorn on a free 127.0.0.1 port, keys and tokens for its users."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx
import uvicorn
from joserfc import jwt
from joserfc.jwk import ECKey, KeySet, OctKey, RSAKey

from tests.support.servers import LOOPBACK, bound_socket
from toolbus import tool_service
from toolbus.application.identity.bearer import Authenticator, JwtVerifier
from toolbus.application.identity.credentials import ApiKey, CredentialTable
from toolbus.domain.errors import NotFound
from toolbus_gateway import Gateway, create_app, parse_gateway_settings

KEYS = {
    "alice": "alice-key-0123456789abcdef",
    "bob": "bob-key-0123456789abcdef",
    "ops": "ops-key-0123456789abcdef",
}
HS256_SECRET = "hs256-secret-0123456789abcdef0123456789"
#: The identity provider's name, and the audience its tokens for this gateway carry.
ISSUER = "test-idp"
AUDIENCE = "toolbus-gateway"
PERMISSIONS = {"users": {"alice": ["default"], "bob": ["default", "research"], "ops": ["*"]}}


@dataclass
class Signer:
    """Makes JWTs the way an identity provider would: HS256, RS256 and ES256."""

    rsa: RSAKey
    ec: ECKey

    @classmethod
    def generate(cls) -> Signer:
        return cls(
            RSAKey.generate_key(2048, parameters={"kid": "rsa-1"}),
            ECKey.generate_key("P-256", parameters={"kid": "ec-1"}),
        )

    def jwks(self) -> dict[str, Any]:
        return KeySet([self.rsa, self.ec]).as_dict(private=False)

    def token(
        self, user: str, alg: str = "HS256", *, expires_in: float = 300, **claims: Any
    ) -> str:
        body = {
            "sub": user,
            "exp": int(time.time() + expires_in),
            "iss": ISSUER,
            "aud": AUDIENCE,
            **claims,
        }
        body = {name: value for name, value in body.items() if value is not None}  # None: left out
        key: Any = {
            "HS256": OctKey.import_key(HS256_SECRET),
            "RS256": self.rsa,
            "ES256": self.ec,
        }[alg]
        header = {"alg": alg} if alg == "HS256" else {"alg": alg, "kid": key.kid}
        return jwt.encode(header, body, key)


def authenticator(
    signer: Signer | None = None,
    tmp_path: Path | None = None,
    jwt: Mapping[str, Any] | None = None,
) -> Authenticator:
    """API keys for every user; with ``signer``, also its JWTs (``jwt``: more settings)."""
    table = CredentialTable(ApiKey.of(user, key) for user, key in KEYS.items())
    if signer is None or tmp_path is None:
        return Authenticator(table)
    (tmp_path / "jwks.json").write_text(json.dumps(signer.jwks()))
    settings = parse_gateway_settings(
        {
            "jwt": {
                "secret-env": "TEST_JWT_SECRET",
                "jwks-file": "jwks.json",
                "issuer": ISSUER,
                "audience": AUDIENCE,
                **(jwt or {}),
            }
        }
    )
    assert settings.jwt is not None
    verifier = JwtVerifier.from_settings(
        settings.jwt,
        where="toolbus.toml [gateway.jwt]",
        environ={"TEST_JWT_SECRET": HS256_SECRET},
        base_dir=tmp_path,
    )
    return Authenticator(table, verifier)


def headers(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[user]}"}


# ------------------------------------------------------------------ the tools


def services() -> tuple[Any, ...]:
    """Echo, a checkout workflow, a streaming tool, and one that fails."""
    tag = uuid.uuid4().hex[:8]

    @tool_service(f"echo-{tag}", request_queue=_queue(tag, "echo"), response_queue=_queue(tag, "e"))
    async def echo(text: str = "") -> str:
        return text

    @tool_service(f"shop-{tag}", request_queue=_queue(tag, "shop"), response_queue=_queue(tag, "s"))
    async def shop(action: str, item: str = "") -> str:
        if action == "missing":
            raise NotFound(f"no item {item!r}")
        return f"{action} {item}".strip()

    @tool_service(
        f"words-{tag}", request_queue=_queue(tag, "words"), response_queue=_queue(tag, "w")
    )
    async def words(text: str) -> Any:
        for word in text.split():
            yield word

    return echo, shop, words


def _queue(tag: str, name: str) -> str:
    return f"non-persistent://gateway-tests/{name}/{tag}"


def snapshot(echo: Any, shop: Any, words: Any) -> dict[str, Any]:
    def service(s: Any) -> dict[str, Any]:
        return s.descriptor()

    def tool(name: str, svc: Any, args: list[str], **extra: Any) -> dict[str, Any]:
        return {
            "type": "tool-service",
            "name": name,
            "description": f"the {name} tool",
            "service": svc.id,
            "arguments": [{"name": a, "type": "string", "description": a} for a in args],
            **extra,
        }

    return {
        "tool-service": {s.id: service(s) for s in (echo, shop, words)},
        "tool": {
            "echo": tool("echo", echo, ["text"]),
            "research": tool("research", echo, ["text"], group=["research"]),
            "add-to-cart": tool("add-to-cart", shop, ["action", "item"], state="shopping"),
            "checkout": tool(
                "checkout", shop, ["action"], **{"applicable-states": ["shopping"], "state": "done"}
            ),
            "find": tool("find", shop, ["action", "item"]),
            "words": tool("words", words, ["text"]),
            "admin-reset": tool("admin-reset", echo, ["text"], group=["admin"]),
        },
        "permissions": PERMISSIONS,
    }


# ------------------------------------------------------------------ the server


class _Server(uvicorn.Server):
    """uvicorn, telling the test when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        self.listening.set()


@dataclass
class RunningGateway:
    gateway: Gateway
    url: str

    def client(self, user: str | None = None, *, token: str | None = None) -> httpx.AsyncClient:
        """A client authenticated as ``user`` (with their API key) or with ``token``."""
        sent = headers(user) if user else {}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        return httpx.AsyncClient(base_url=self.url, headers=sent, timeout=30)


@asynccontextmanager
async def serving(
    gateway: Gateway, *, limit_concurrency: int | None = None
) -> AsyncIterator[RunningGateway]:
    """Run ``gateway`` under uvicorn on a free loopback port for the block."""
    listener = bound_socket()
    port = listener.getsockname()[1]
    server = _Server(
        uvicorn.Config(
            create_app(gateway),
            log_level="warning",
            lifespan="on",
            limit_concurrency=limit_concurrency,
            timeout_graceful_shutdown=5,
        )
    )
    async with anyio.create_task_group() as tasks:
        done = anyio.Event()

        async def serve() -> None:
            try:
                with listener:
                    await server.serve(sockets=[listener])
            finally:
                done.set()
                server.listening.set()

        tasks.start_soon(serve)
        await server.listening.wait()
        if done.is_set():
            raise RuntimeError("the gateway did not start; see the log above")
        try:
            yield RunningGateway(gateway, f"http://{LOOPBACK}:{port}")
        finally:
            server.should_exit = True
            await done.wait()


def metric(text: str, name: str, labels: Mapping[str, str] | None = None) -> float:
    """The value of one sample in Prometheus text output (0 when absent)."""
    wanted = ",".join(f'{k}="{v}"' for k, v in (labels or {}).items())
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        head, _, value = line.rpartition(" ")
        metric_name, _, rest = head.partition("{")
        if metric_name == name and (not wanted or rest.rstrip("}") == wanted):
            return float(value)
    return 0.0
