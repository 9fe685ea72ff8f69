"""A real OpenID provider for tests: panva's ``oidc-provider`` (tests/node) on a free port.

:func:`oidc_provider` starts ``tests/node/oidc_provider.mjs`` with a fresh ES256
key, the clients and scopes a test names, and access tokens that are JWTs for
whatever resource a client asks for (RFC 8707). :class:`OidcProvider` rotates
its keys in place, gets tokens by the client-credentials grant, and
:class:`HeadlessBrowser` drives its log-in and consent pages the way a
person's browser would (the provider's interaction logs in the account the
authorization request's ``login_hint`` names and grants every scope asked for),
for the MCP SDK's authorization-code + PKCE flow.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import anyio
import httpx
from joserfc.jwk import ECKey
from mcp.shared.auth import AuthorizationCodeResult

from tests.support.real_parts import requires_node_package
from tests.support.servers import LOOPBACK, Restartable, StickyPort, chosen, server_process

NODE_DIR = Path(__file__).resolve().parents[1] / "node"
SCRIPT = NODE_DIR / "oidc_provider.mjs"
#: Scopes the provider knows, for the doors' [..jwt.scopes] tables.
SCOPES = ("tools:read", "tools:admin")
#: A confidential client that gets tokens by the client-credentials grant.
BRIDGE_CLIENT = "mcp-bridge"
#: A public client registered beforehand (others register themselves), allowed every scope.
PUBLIC_CLIENT = "toolbus-tests"
#: Where the provider sends the person back to: nothing listens there; the headless
#: browser stops at the redirect and hands the code on.
REDIRECT_URI = "http://127.0.0.1:9/callback"


needs_oidc_provider = requires_node_package("oidc-provider", "the OpenID provider oidc-provider")


def signing_key() -> ECKey:
    return ECKey.generate_key(
        "P-256", parameters={"kid": f"es-{secrets.token_hex(4)}", "use": "sig"}
    )


@dataclass
class OidcProvider:
    """The running provider: its issuer, its keys, and a confidential client's credentials.

    :meth:`stop` and :meth:`start` take it away and bring it back at the same address
    (with the keys it has then; what it held in memory, such as registered clients and
    grants, is gone).
    """

    issuer: str
    keys: list[ECKey]
    client_secret: str = field(repr=False)
    process: Restartable = field(repr=False)
    setup: Path = field(repr=False)
    rotations: int = 0

    async def stop(self) -> None:
        await self.process.stop()

    async def start(self) -> None:
        await self.process.start()

    @property
    def jwks_url(self) -> str:
        return f"{self.issuer}/jwks"

    @property
    def signing_kid(self) -> str:
        kid = self.keys[0].kid
        assert kid is not None
        return kid

    async def rotate(self) -> str:
        """Sign with a new key from now on, still publishing the old ones; the new key id."""
        self.keys.insert(0, signing_key())
        await self._publish()
        self.rotations += 1
        return self.signing_kid

    async def retire(self, *kids: str) -> None:
        """Stop publishing the keys ``kids`` (tokens they signed no longer verify anywhere)."""
        self.keys = [key for key in self.keys if key.kid not in kids]
        await self._publish()

    async def _publish(self) -> None:
        setup = json.loads(await anyio.Path(self.setup).read_text())
        setup.update(keys=private_jwks(self.keys), signing_kid=self.signing_kid)
        await anyio.Path(self.setup).write_text(json.dumps(setup))  # a restart keeps them
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"{self.issuer}/_test/keys",
                json={"keys": private_jwks(self.keys), "signing_kid": self.signing_kid},
            )
        assert answer.status_code == 204, answer.text

    async def client_credentials_token(
        self, resource: str, scope: str | None = None, client_id: str = BRIDGE_CLIENT
    ) -> str:
        """An access token for ``resource`` by the client-credentials grant."""
        form = {"grant_type": "client_credentials", "resource": resource}
        if scope is not None:
            form["scope"] = scope
        async with httpx.AsyncClient() as http:
            answer = await http.post(
                f"{self.issuer}/token", data=form, auth=(client_id, self.client_secret)
            )
        assert answer.status_code == 200, answer.text
        token: str = answer.json()["access_token"]
        return token


def private_jwks(keys: Sequence[ECKey]) -> list[dict[str, Any]]:
    return [dict(key.as_dict(private=True)) for key in keys]


@contextlib.contextmanager
def oidc_provider(
    workdir: Path, *, scopes: Sequence[str] = SCOPES, access_token_ttl: int = 300
) -> Iterator[OidcProvider]:
    """Run the provider for the block (workdir holds its setup and its log), on a free
    port (another one where it was taken), where it starts again after a stop."""
    keys = [signing_key()]
    secret = secrets.token_urlsafe(32)
    setup = {
        "keys": private_jwks(keys),
        "signing_kid": keys[0].kid,
        "scopes": list(scopes),
        "access_token_ttl": access_token_ttl,
        "cookie_key": secrets.token_urlsafe(32),
        "clients": [
            {
                "client_id": BRIDGE_CLIENT,
                "client_secret": secret,
                "grant_types": ["client_credentials"],
                "response_types": [],
                "redirect_uris": [],
            },
            {
                "client_id": PUBLIC_CLIENT,
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "redirect_uris": [REDIRECT_URI],
            },
        ],
    }
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / "setup.json"
    path.write_text(json.dumps(setup))
    server = StickyPort(
        lambda port: server_process(
            ["node", str(SCRIPT), str(port), str(path)], port=port, workdir=workdir
        )
    )
    with Restartable(server.running) as process:
        issuer = f"http://{LOOPBACK}:{chosen(server.port)}"
        yield OidcProvider(issuer, keys, secret, process, path)


class HeadlessBrowser:
    """A person's browser for the MCP SDK's OAuth flow, without the person.

    Give :meth:`redirect` and :meth:`callback` to ``OAuthClientProvider`` as its
    redirect and callback handlers: the browser opens the authorization URL
    (asking to log in as ``user``), follows the provider's pages and redirects
    with their cookies, and hands back the code the provider redirects to
    ``redirect_uri`` with.
    """

    def __init__(self, redirect_uri: str, user: str) -> None:
        self.redirect_uri = redirect_uri
        self.user = user
        self._url: str | None = None
        self._cookies = httpx.Cookies()
        #: Authorization URLs opened, for tests to look at (scopes, resource).
        self.opened: list[str] = []

    async def redirect(self, authorization_url: str) -> None:
        self._url = f"{authorization_url}&{urlencode({'login_hint': self.user})}"
        self.opened.append(authorization_url)

    async def callback(self) -> AuthorizationCodeResult:
        url = self._url
        assert url is not None, "the flow asked for the callback before the redirect"
        async with httpx.AsyncClient(cookies=self._cookies, timeout=30) as http:
            for _ in range(20):
                answer = await http.get(url)
                if not answer.is_redirect:
                    raise AssertionError(
                        f"the provider answered {answer.status_code}: {answer.text}"
                    )
                url = urljoin(url, answer.headers["location"])
                if url.startswith(self.redirect_uri):
                    query = parse_qs(urlsplit(url).query)
                    if "error" in query:
                        raise AssertionError(f"the provider refused: {query}")
                    return AuthorizationCodeResult(
                        code=query["code"][0],
                        state=query.get("state", [None])[0],
                        iss=query.get("iss", [None])[0],
                    )
            self._cookies = http.cookies
        raise AssertionError("the provider kept redirecting")
