"""Logging in to an imported MCP server that wants OAuth: the client-credentials grant.

``toolbus serve mcp --url ... --oauth-issuer URL --oauth-client-id VAR
--oauth-client-secret VAR`` gets access tokens for the server from the
authorization server the server names (RFC 9728 metadata), the way the MCP
SDK's :class:`~mcp.client.auth.extensions.client_credentials.ClientCredentialsOAuthProvider`
does it: on the server's first ``401`` it discovers the server's metadata and
its authorization server's, then asks for a token for the server (RFC 8707
``resource``), authenticating with the client id and secret. The credentials
go only to the configured issuer: a server naming another authorization server
stops the flow.

:class:`RenewingClientCredentials` adds what a long-running bridge needs: a
token is renewed before it expires (once ``renew_at`` of its lifetime has
passed), so calls never wait for a ``401`` and a new grant. Tokens, the secret
and the grant's answers are never logged, shown or stored beyond this process's
memory.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field

import httpx2
from mcp.client.auth import TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from toolbus.application.identity.credentials import Secret

log = logging.getLogger("toolbus.mcp")

#: The share of a token's lifetime after which it is renewed.
RENEW_AT = 0.8


@dataclass(frozen=True, slots=True)
class ClientCredentials:
    """How to get tokens for an imported server: the authorization server that issued the
    client's credentials, the client's id and secret, and the scopes to ask for."""

    issuer: str
    client_id: str
    client_secret: Secret = field(repr=False)
    scope: str | None = None
    #: One flow per server URL, kept across reconnections (its token with it).
    _flows: dict[str, RenewingClientCredentials] = field(
        default_factory=dict, repr=False, compare=False
    )

    def auth_for(self, server_url: str) -> RenewingClientCredentials:
        """The httpx2 auth flow that logs in to ``server_url``."""
        flow = self._flows.get(server_url)
        if flow is None:
            flow = self._flows[server_url] = RenewingClientCredentials(
                server_url,
                issuer=self.issuer,
                client_id=self.client_id,
                client_secret=self.client_secret,
                scope=self.scope,
            )
        return flow


class MemoryTokenStorage(TokenStorage):
    """Tokens kept in this process only: a restarted bridge asks for new ones."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class RenewingClientCredentials(ClientCredentialsOAuthProvider):
    """The SDK's client-credentials flow, renewing each token before it expires."""

    def __init__(
        self,
        server_url: str,
        *,
        issuer: str,
        client_id: str,
        client_secret: Secret,
        scope: str | None = None,
        renew_at: float = RENEW_AT,
    ) -> None:
        super().__init__(
            server_url,
            MemoryTokenStorage(),
            client_id,
            client_secret.reveal(),
            scope=scope,
            issuer=issuer,
        )
        self._renew_at = renew_at
        self._renew_after: float | None = None
        #: Tokens received (for tests and the curious): by the grant, renewed ahead of expiry.
        self.tokens_received = 0

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        self.tokens_received += 1
        tokens = self.context.current_tokens
        expires_in = None if tokens is None else tokens.expires_in
        self._renew_after = (
            None if expires_in is None else time.time() + int(expires_in) * self._renew_at
        )

    def _renewal_due(self) -> bool:
        return (
            self._renew_after is not None
            and self.context.oauth_metadata is not None
            and self.context.current_tokens is not None
            and time.time() >= self._renew_after
        )

    async def _auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self._renewal_due():
            async with self.context.lock:
                if self._renewal_due():  # not renewed by another request meanwhile
                    renewal = yield await self._exchange_token_client_credentials()
                    if renewal.status_code in (200, 201):
                        await self._handle_token_response(renewal)
                    else:
                        # The token in hand still serves until it expires; then the
                        # server's 401 starts the grant afresh.
                        self._renew_after = None
                        log.warning(
                            "MCP server %s: renewing its access token failed (HTTP %s); "
                            "the current one serves until it expires",
                            self.context.server_url,
                            renewal.status_code,
                        )
        flow = super()._auth_flow(request)
        try:
            outgoing = await flow.__anext__()
            while True:
                response = yield outgoing
                outgoing = await flow.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()
