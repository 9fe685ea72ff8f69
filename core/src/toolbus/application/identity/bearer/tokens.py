"""Checking a JWT access token: signature, claims, audience, scopes, and the user it names.

Signatures and claims are checked by joserfc. HS256 tokens are checked with a
shared secret; RS256 and ES256 tokens with an identity provider's public keys
(:mod:`~toolbus.application.identity.bearer.provider_keys`), which are
fetched again when a token names a key the door does not hold yet.

A token must carry ``exp``, its issuer's ``iss`` and, as an audience, this
door's resource or configured audience (RFC 8707: a token issued for another
application or another door must not pass here). The user is a claim
(``user-claim``); the token's scopes (``scope`` or ``scp``) reach the tool
groups the door's ``scopes`` table maps them to.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
from joserfc import jwt
from joserfc.errors import BadSignatureError, ClaimError, ExpiredTokenError, JoseError
from joserfc.jwk import GuestProtocol, Key, KeySet, OctKey

from toolbus.application.identity.bearer.principal import AuthFailure, KeysUnavailable, Principal
from toolbus.application.identity.bearer.provider_keys import (
    KeySource,
    ProviderKeys,
    StaticKeys,
    key_url_problem,
)
from toolbus.application.identity.bearer.settings import TokenSettings
from toolbus.application.identity.credentials import Secret, read_secret
from toolbus.domain.errors import ConfigError, Problem

#: Why a provider's keys need an issuer and an audience: one provider serves many applications.
SHARED_PROVIDER = (
    "an identity provider's keys sign the tokens of every application it serves; set "
    "issuer and resource (or audience) so that only tokens issued for this door pass"
)
HS256 = "HS256"
ASYMMETRIC = ("RS256", "ES256")
#: RFC 7518 §3.2: an HS256 key must be at least as long as the hash.
MIN_HS256_SECRET = 32
#: Seconds at least between two fetches of a provider's keys, whatever its caching headers say
#: (or ``keys-refresh``, when that is shorter).
MIN_KEY_REFRESH = 30.0


class KeysNotAtHand(AuthFailure):
    """The token names a key the door does not hold now; fetching the provider's keys may help.

    :meth:`JwtVerifier.verify` raises it; :meth:`JwtVerifier.verify_fetching` fetches.
    """

    def __init__(self, kid: str | None, message: str) -> None:
        super().__init__("invalid-token", message)
        self.kid = kid


class JwtVerifier:
    """Checks a JWT's signature and claims and reads the user (and scopes) from it.

    Enter it (``async with``) to keep a provider's keys fresh: a verifier with
    a JWKS URL fetches them in the background while it is entered.
    """

    def __init__(
        self,
        *,
        secret: Secret | None = None,
        keys: KeySource | KeySet | None = None,
        issuer: str | None = None,
        audiences: Sequence[str] = (),
        user_claim: str = "sub",
        leeway: int = 30,
        max_age: int | None = None,
        scopes: Mapping[str, Sequence[str]] | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        if secret is None and keys is None:
            raise ValueError("a JwtVerifier needs an HS256 secret, a provider's keys, or both")
        if keys is not None and not (issuer and audiences):
            raise ValueError(SHARED_PROVIDER)
        self._secret = None if secret is None else OctKey.import_key(secret.reveal())
        self.keys: KeySource | None = StaticKeys(keys) if isinstance(keys, KeySet) else keys
        self.algorithms = ((HS256,) if secret is not None else ()) + (
            ASYMMETRIC if keys is not None else ()
        )
        self.issuer = issuer
        self.audiences = tuple(dict.fromkeys(audiences))
        self.user_claim = user_claim
        self.leeway = leeway
        #: Seconds since ``iat`` beyond which a token is refused (None: only ``exp`` counts).
        self.max_age = max_age
        #: Scope -> the tool groups it reaches; empty: scopes do not limit a token.
        self.scopes = {scope: tuple(groups) for scope, groups in (scopes or {}).items()}
        self._now = now

    @classmethod
    def from_settings(
        cls,
        settings: TokenSettings,
        *,
        where: str,
        environ: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> JwtVerifier:
        """The verifier a token table describes; :class:`ConfigError` names what is wrong.

        ``where`` names the table in messages (``toolbus.toml [gateway.jwt]``).
        """
        problems = _problems(settings, where)
        if problems:
            raise ConfigError(problems)
        secret = None
        if settings.secret_env is not None or settings.secret_file is not None:
            secret = read_secret(
                env=settings.secret_env,
                file=settings.secret_file,
                where=where,
                environ=environ,
                base_dir=base_dir,
                min_length=MIN_HS256_SECRET,
            )
        keys: KeySource | None = None
        if settings.jwks_file is not None:
            keys = StaticKeys.read(settings.jwks_file, base_dir=base_dir, where=where)
        elif settings.jwks_url is not None or settings.discover:
            keys = ProviderKeys(
                settings.jwks_url,
                issuer=None if settings.jwks_url is not None else settings.issuer,
                refresh=settings.keys_refresh,
                max_stale=settings.keys_max_stale,
                min_refresh=min(settings.keys_refresh, MIN_KEY_REFRESH),
                transport=transport,
            )
        return cls(
            secret=secret,
            keys=keys,
            issuer=settings.issuer,
            audiences=accepted_audiences(settings),
            user_claim=settings.user_claim,
            leeway=settings.leeway,
            max_age=settings.max_age,
            scopes=settings.scopes,
        )

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> JwtVerifier:
        if isinstance(self.keys, ProviderKeys):
            await self.keys.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if isinstance(self.keys, ProviderKeys):
            await self.keys.__aexit__(exc_type, exc, tb)

    def readiness(self) -> tuple[bool, str] | None:
        """What ``/readyz`` says about the provider's keys (None: a shared secret only)."""
        return None if self.keys is None else self.keys.readiness()

    # ------------------------------------------------------------------ checking

    def verify(self, token: str) -> Principal:
        """The caller a valid token names, with the keys at hand, or :class:`AuthFailure`.

        A token naming a key not at hand raises :class:`KeysNotAtHand` when
        fetching the provider's keys could find it (:meth:`verify_fetching`).
        """
        return self._verify(token, final=False)

    async def verify_fetching(self, token: str) -> Principal:
        """:meth:`verify`, fetching the provider's keys once if the token names one not at hand.

        Raises :class:`~toolbus.application.identity.bearer.principal.KeysUnavailable`
        when the provider's keys cannot be had at all.
        """
        try:
            return self._verify(token, final=False)
        except KeysNotAtHand as pending:
            assert self.keys is not None
            await self.keys.fetch_for(pending.kid)
            return self._verify(token, final=True)

    def _verify(self, token: str, *, final: bool) -> Principal:
        try:
            decoded = jwt.decode(
                token,
                lambda guest: self._key_for(guest, final=final),
                algorithms=list(self.algorithms),
            )
        except BadSignatureError:
            raise AuthFailure("bad-signature", "the token's signature does not verify") from None
        except JoseError as exc:
            raise AuthFailure(
                "invalid-token", f"the token cannot be read: {_reason(exc)}"
            ) from None
        claims = decoded.claims
        self._check_claims(claims)
        user = claims.get(self.user_claim)
        if not isinstance(user, str) or not user:
            raise AuthFailure(
                "no-user", f"the token has no {self.user_claim!r} claim naming the user"
            )
        issuer = claims.get("iss")
        scopes = token_scopes(claims)
        reach = None
        if self.scopes:
            reach = frozenset(
                group for scope in scopes if scope in self.scopes for group in self.scopes[scope]
            )
        return Principal(
            user,
            "jwt",
            issuer if isinstance(issuer, str) else "jwt",
            scopes=scopes,
            reach=reach,
            scope_groups=self.scopes,
        )

    def _check_claims(self, claims: dict[str, Any]) -> None:
        options: dict[str, dict[str, object]] = {"exp": {"essential": True}}
        if self.max_age is not None:
            options["iat"] = {"essential": True}
        if self.issuer is not None:
            options["iss"] = {"essential": True, "value": self.issuer}
        if self.audiences:
            options["aud"] = {"essential": True, "values": list(self.audiences)}
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._now()),
            leeway=self.leeway,
            **options,  # type: ignore[arg-type]
        )
        try:
            registry.validate(claims)
        except ExpiredTokenError:
            raise AuthFailure("expired", "the token has expired; get a new one") from None
        except ClaimError as exc:
            message = f"the token's claims: {_reason(exc)}"
            if getattr(exc, "claim", None) == "aud" or "'aud'" in message:
                message += f" (it must name {' or '.join(map(repr, self.audiences))})"
            raise AuthFailure("invalid-token", message) from None
        if self.max_age is not None:
            issued = claims.get("iat")
            if not isinstance(issued, int | float) or isinstance(issued, bool):
                raise AuthFailure("invalid-token", "the token has no valid 'iat' claim")
            if self._now() - issued > self.max_age + self.leeway:
                raise AuthFailure(
                    "expired",
                    f"the token was issued more than {self.max_age} s ago; get a new one",
                )

    def _key_for(self, guest: GuestProtocol, *, final: bool) -> Key | KeySet:
        header = guest.headers()
        if header.get("alg") == HS256:
            if self._secret is None:
                raise AuthFailure("invalid-token", "HS256 tokens are not accepted here")
            return self._secret
        keys = self.keys
        if keys is None:
            raise AuthFailure("invalid-token", "only HS256 tokens are accepted here")
        kid = header.get("kid")
        kid = kid if isinstance(kid, str) else None
        if not keys.knows(kid) or not _usable(keys):
            if not final and isinstance(keys, ProviderKeys):
                raise KeysNotAtHand(kid, f"the token names key {kid!r}, not at hand")
            key_set = keys.key_set()  # KeysUnavailable when there are none to trust
            if kid is None and len(key_set.keys) == 1:
                return key_set
            raise AuthFailure(
                "invalid-token",
                f"the token names signing key {kid!r}, which the identity provider does not "
                "publish",
            )
        return keys.key_set()


def accepted_audiences(settings: TokenSettings) -> tuple[str, ...]:
    """The ``aud`` values a token may name: the resource (either spelling of a trailing
    slash, which URL libraries add or drop) and the configured audience."""
    found: list[str] = []
    if settings.resource is not None:
        bare = settings.resource.rstrip("/")
        found += [settings.resource, bare, bare + "/"]
    if settings.audience is not None:
        found.append(settings.audience)
    return tuple(dict.fromkeys(found))


def token_scopes(claims: Mapping[str, Any]) -> frozenset[str]:
    """The scopes a token carries: ``scope`` (RFC 9068, space-separated) or ``scp``."""
    for name in ("scope", "scp"):
        value = claims.get(name)
        if isinstance(value, str):
            return frozenset(value.split())
        if isinstance(value, list):
            return frozenset(item for item in value if isinstance(item, str) and item)
    return _NO_SCOPES


_NO_SCOPES: frozenset[str] = frozenset()


def _usable(keys: KeySource) -> bool:
    try:
        keys.key_set()
    except KeysUnavailable:
        return False
    return True


def _problems(settings: TokenSettings, where: str) -> list[Problem]:
    problems: list[Problem] = []
    sources = [
        name
        for name, given in (
            ("jwks-file", settings.jwks_file),
            ("jwks-url", settings.jwks_url),
            ("discover", settings.discover),
        )
        if given
    ]
    if len(sources) > 1:
        problems.append(
            Problem(where, sources[1], f"give one of {', '.join(sources)}, not several")
        )
    has_secret = settings.secret_env is not None or settings.secret_file is not None
    if not sources and not has_secret:
        problems.append(
            Problem(
                where,
                "",
                "needs the keys tokens are signed with: jwks-url, discover = true (with "
                "issuer), jwks-file, or secret-env / secret-file (HS256)",
            )
        )
    if settings.provider_keys:
        which = sources[0] if sources else "jwks-file"
        if not settings.issuer:
            problems.append(
                Problem(where, "issuer", f"is required with {which}: {SHARED_PROVIDER}")
            )
        if not (settings.audience or settings.resource):
            problems.append(
                Problem(where, "audience", f"is required with {which}: {SHARED_PROVIDER}")
            )
    if settings.jwks_url is not None:
        problem = key_url_problem(settings.jwks_url)
        if problem is not None:
            problems.append(Problem(where, "jwks-url", problem))
    if settings.discover and settings.issuer:
        problem = key_url_problem(settings.issuer)
        if problem is not None:
            problems.append(Problem(where, "issuer", f"to discover its keys: {problem}"))
    if settings.resource is not None and not (settings.issuer or settings.authorization_servers):
        problems.append(
            Problem(
                where,
                "resource",
                "is published for OAuth clients with the authorization server that issues "
                "its tokens: set issuer (or authorization-servers)",
            )
        )
    return problems


def _reason(exc: JoseError) -> str:
    return exc.description or exc.error
