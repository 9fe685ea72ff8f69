"""Who is calling an HTTP front door: an API key or a JWT, sent as a bearer token."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx

from toolbus.application.identity.bearer.principal import (
    AuthFailure,
    InsufficientScope,
    Principal,
    scopes_reaching,
)
from toolbus.application.identity.bearer.resource import ProtectedResource, challenge
from toolbus.application.identity.bearer.settings import TokenSettings
from toolbus.application.identity.bearer.tokens import JwtVerifier
from toolbus.application.identity.credentials import CredentialTable, Secret
from toolbus.domain.errors import ConfigError, Problem


class Authenticator:
    """API keys and, when configured, JWTs. At least one of the two is required.

    A token with three dot-separated parts is read as a JWT when JWTs are
    configured; anything else is looked up in the credential table. Enter it
    (``async with``) while the door serves: an identity provider's keys are
    kept fresh meanwhile.

    ``resource`` describes the door to OAuth clients (RFC 9728): its
    challenges then name the metadata document.
    """

    def __init__(
        self,
        credentials: CredentialTable | None = None,
        jwt_verifier: JwtVerifier | None = None,
        *,
        resource: ProtectedResource | None = None,
        door: str = "the front door",
    ) -> None:
        if credentials is None and jwt_verifier is None:
            raise ConfigError(
                [
                    Problem(
                        door,
                        "",
                        "no way to authenticate callers: add API keys under "
                        "[[credentials.api-keys]] or JWT keys under its [...jwt] table in "
                        "toolbus.toml",
                    )
                ]
            )
        self.credentials = credentials
        self.jwt = jwt_verifier
        self.resource = resource

    @classmethod
    def from_settings(
        cls,
        credentials: CredentialTable | None,
        tokens: TokenSettings | None,
        *,
        where: str,
        door: str,
        environ: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> Authenticator:
        """API keys, and the tokens a door's token table (``where``) describes."""
        verifier = resource = None
        if tokens is not None:
            verifier = JwtVerifier.from_settings(
                tokens, where=where, environ=environ, base_dir=base_dir, transport=transport
            )
            resource = ProtectedResource.from_settings(tokens, name=door)
        return cls(credentials, verifier, resource=resource, door=door)

    async def __aenter__(self) -> Authenticator:
        if self.jwt is not None:
            await self.jwt.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.jwt is not None:
            await self.jwt.__aexit__(exc_type, exc, tb)

    def authenticate(self, token: Secret | None) -> Principal:
        """The caller ``token`` proves, with the keys at hand, or :class:`AuthFailure`.

        A JWT naming a key that is not at hand raises
        :class:`~toolbus.application.identity.bearer.tokens.KeysNotAtHand`;
        :meth:`authenticate_fetching` fetches the provider's keys instead.
        """
        raw = self._raw(token)
        if self.jwt is not None and raw.count(".") == 2:
            return self.jwt.verify(raw)
        return self._api_key(token)

    async def authenticate_fetching(self, token: Secret | None) -> Principal:
        """:meth:`authenticate`, fetching the provider's keys once for a key not yet at hand.

        Raises :class:`~toolbus.application.identity.bearer.principal.KeysUnavailable`
        when the provider's keys cannot be had.
        """
        raw = self._raw(token)
        if self.jwt is not None and raw.count(".") == 2:
            return await self.jwt.verify_fetching(raw)
        return self._api_key(token)

    def challenge(self, failure: AuthFailure, *, scopes: Sequence[str] = ()) -> str:
        """The ``WWW-Authenticate`` value of the answer to ``failure`` (RFC 6750 §3).

        It names the door's metadata when there is one. ``scopes`` (of a ``401``)
        are those the request needs (:meth:`scopes_for`); a ``403`` for scope
        names those that would reach what was refused.
        """
        metadata = None if self.resource is None else self.resource.metadata_url
        if isinstance(failure, InsufficientScope):
            return challenge(
                error="insufficient_scope",
                description=failure.reason,
                scopes=failure.scopes,
                metadata_url=metadata,
            )
        if failure.reason == "missing":
            return challenge(metadata_url=metadata, scopes=scopes)
        return challenge(
            error="invalid_token", description=failure.reason, metadata_url=metadata, scopes=scopes
        )

    def scopes_for(self, groups: Iterable[str] | None) -> list[str]:
        """The fewest scopes of the door's table that reach ``groups`` (None: ``default``)."""
        return [] if self.jwt is None else scopes_reaching(self.jwt.scopes, groups)

    def readiness(self) -> dict[str, str]:
        """``/readyz``'s check of the provider's keys, if tokens are signed with them."""
        found = None if self.jwt is None else self.jwt.readiness()
        return {} if found is None else {"keys": found[1]}

    @property
    def ready(self) -> bool:
        """Whether tokens can be checked now (API keys always can)."""
        found = None if self.jwt is None else self.jwt.readiness()
        return found is None or found[0]

    def _raw(self, token: Secret | None) -> str:
        if token is None:
            what = "API key" if self.jwt is None else "API key or JWT"
            raise AuthFailure("missing", f"no credential; send 'Authorization: Bearer <{what}>'")
        return token.reveal()

    def _api_key(self, token: Secret | None) -> Principal:
        identity = None if self.credentials is None else self.credentials.authenticate(token)
        if identity is None:
            what = "API key" if self.jwt is None else "API key or JWT"
            raise AuthFailure("unknown-key", f"the {what} is not valid")
        return Principal(identity.user, "api-key", identity.label)
