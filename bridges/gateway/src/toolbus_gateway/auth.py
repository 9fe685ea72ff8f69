"""Who is calling: API keys and JWTs (HS256, or RS256/ES256 from a JWKS file) -> a user.

A request carries its credential as ``Authorization: Bearer <token>`` (or, for
the console in a browser, in the session cookie set by its login form). A token
with three dot-separated parts is read as a JWT when JWTs are configured;
anything else is looked up in the credential table. Signatures and claims are
checked by joserfc; keys are compared by :mod:`toolbus.application.identity.credentials`.

Failures are :class:`AuthFailure`: a short ``reason`` for metrics and the
``WWW-Authenticate`` header, and a message for the caller that says what to
fix without echoing the credential.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from joserfc import jwt
from joserfc.errors import (
    BadSignatureError,
    ClaimError,
    ExpiredTokenError,
    JoseError,
)
from joserfc.jwk import GuestProtocol, KeySet, OctKey

from toolbus.application.identity.credentials import (
    CredentialTable,
    Secret,
    read_secret,
)
from toolbus.domain.errors import ConfigError, Problem
from toolbus_gateway.settings import JwtSettings

#: Why a credential was refused; the label of ``toolbus_gateway_auth_failures_total``.
FailureReason = Literal[
    "missing", "unknown-key", "expired", "bad-signature", "invalid-token", "no-user"
]
Method = Literal["api-key", "jwt"]

#: Why a key set needs both claims checked: one identity provider serves many applications.
SHARED_PROVIDER = (
    "an identity provider's keys sign the tokens of every application it serves; set "
    "issuer and audience in [gateway.jwt] so that only tokens issued for this gateway pass"
)

HS256 = "HS256"
ASYMMETRIC = ("RS256", "ES256")
#: RFC 7518 §3.2: an HS256 key must be at least as long as the hash.
MIN_HS256_SECRET = 32


class AuthFailure(Exception):
    """The request is not authenticated (HTTP 401)."""

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason: FailureReason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Principal:
    """Who authenticated: the user, how they proved it, and which credential."""

    user: str
    method: Method
    #: The API key's label, or the JWT's issuer; never the credential itself.
    credential: str


class JwtVerifier:
    """Checks a JWT's signature and claims and reads the user from it."""

    def __init__(
        self,
        *,
        secret: Secret | None = None,
        jwks: KeySet | None = None,
        issuer: str | None = None,
        audience: str | None = None,
        user_claim: str = "sub",
        leeway: int = 30,
        max_age: int | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        if secret is None and jwks is None:
            raise ValueError("a JwtVerifier needs an HS256 secret, a JWKS key set, or both")
        if jwks is not None and not (issuer and audience):
            raise ValueError(SHARED_PROVIDER)
        self._secret = None if secret is None else OctKey.import_key(secret.reveal())
        self._jwks = jwks
        self.algorithms = ((HS256,) if secret is not None else ()) + (
            ASYMMETRIC if jwks is not None else ()
        )
        self.issuer = issuer
        self.audience = audience
        self.user_claim = user_claim
        self.leeway = leeway
        #: Seconds since ``iat`` beyond which a token is refused (None: only ``exp`` counts).
        self.max_age = max_age
        self._now = now

    @classmethod
    def from_settings(
        cls,
        settings: JwtSettings,
        *,
        environ: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
    ) -> JwtVerifier:
        """The verifier ``[gateway.jwt]`` describes; :class:`ConfigError` names what is wrong."""
        where = "toolbus.toml [gateway.jwt]"
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
        jwks = None if settings.jwks_file is None else _read_jwks(settings.jwks_file, base_dir)
        if jwks is not None:
            missing = [name for name in ("issuer", "audience") if not getattr(settings, name)]
            if missing:
                raise ConfigError(
                    [
                        Problem(where, name, f"is required with jwks-file: {SHARED_PROVIDER}")
                        for name in missing
                    ]
                )
        if secret is None and jwks is None:
            raise ConfigError(
                [
                    Problem(
                        where,
                        "",
                        "needs secret-env or secret-file (HS256), jwks-file (RS256/ES256), or both",
                    )
                ]
            )
        return cls(
            secret=secret,
            jwks=jwks,
            issuer=settings.issuer,
            audience=settings.audience,
            user_claim=settings.user_claim,
            leeway=settings.leeway,
            max_age=settings.max_age,
        )

    def verify(self, token: str) -> Principal:
        """The caller a valid token names, or :class:`AuthFailure`."""
        try:
            decoded = jwt.decode(token, self._key_for, algorithms=list(self.algorithms))
        except BadSignatureError:
            raise AuthFailure("bad-signature", "the token's signature does not verify") from None
        except JoseError as exc:
            raise AuthFailure(
                "invalid-token", f"the token cannot be read: {_reason(exc)}"
            ) from None
        options: dict[str, dict[str, object]] = {"exp": {"essential": True}}
        if self.max_age is not None:
            options["iat"] = {"essential": True}
        if self.issuer is not None:
            options["iss"] = {"essential": True, "value": self.issuer}
        if self.audience is not None:
            options["aud"] = {"essential": True, "value": self.audience}
        registry = jwt.JWTClaimsRegistry(
            now=lambda: int(self._now()),
            leeway=self.leeway,
            **options,  # type: ignore[arg-type]
        )
        try:
            registry.validate(decoded.claims)
        except ExpiredTokenError:
            raise AuthFailure("expired", "the token has expired; get a new one") from None
        except ClaimError as exc:
            raise AuthFailure("invalid-token", f"the token's claims: {_reason(exc)}") from None
        if self.max_age is not None:
            issued = decoded.claims.get("iat")
            if not isinstance(issued, int | float) or isinstance(issued, bool):
                raise AuthFailure("invalid-token", "the token has no valid 'iat' claim")
            if self._now() - issued > self.max_age + self.leeway:
                raise AuthFailure(
                    "expired",
                    f"the token was issued more than {self.max_age} s ago; get a new one",
                )
        user = decoded.claims.get(self.user_claim)
        if not isinstance(user, str) or not user:
            raise AuthFailure(
                "no-user", f"the token has no {self.user_claim!r} claim naming the user"
            )
        issuer = decoded.claims.get("iss")
        return Principal(user, "jwt", issuer if isinstance(issuer, str) else "jwt")

    def _key_for(self, guest: GuestProtocol) -> OctKey | KeySet:
        header = guest.headers()
        if header.get("alg") == HS256:
            if self._secret is None:
                raise AuthFailure("invalid-token", "HS256 tokens are not accepted here")
            return self._secret
        if self._jwks is None:
            raise AuthFailure("invalid-token", "only HS256 tokens are accepted here")
        return self._jwks


class Authenticator:
    """API keys and, when configured, JWTs. At least one of the two is required."""

    def __init__(
        self, credentials: CredentialTable | None = None, jwt_verifier: JwtVerifier | None = None
    ) -> None:
        if credentials is None and jwt_verifier is None:
            raise ConfigError(
                [
                    Problem(
                        "gateway",
                        "",
                        "no way to authenticate callers: add API keys under "
                        "[[credentials.api-keys]] or JWT keys under [gateway.jwt] in toolbus.toml",
                    )
                ]
            )
        self.credentials = credentials
        self.jwt = jwt_verifier

    def authenticate(self, token: Secret | None) -> Principal:
        """The caller ``token`` proves, or :class:`AuthFailure`."""
        if token is None:
            raise AuthFailure(
                "missing", "no credential; send 'Authorization: Bearer <API key or JWT>'"
            )
        raw = token.reveal()
        if self.jwt is not None and raw.count(".") == 2:
            return self.jwt.verify(raw)
        identity = None if self.credentials is None else self.credentials.authenticate(token)
        if identity is None:
            what = "API key" if self.jwt is None else "API key or JWT"
            raise AuthFailure("unknown-key", f"the {what} is not valid")
        return Principal(identity.user, "api-key", identity.label)


def _read_jwks(path: str, base_dir: Path | None) -> KeySet:
    where = "toolbus.toml [gateway.jwt]"
    resolved = Path(path).expanduser()
    if not resolved.is_absolute() and base_dir is not None:
        resolved = base_dir / resolved
    try:
        document = json.loads(resolved.read_text(encoding="utf-8"))
        keys = KeySet.import_key_set(document)
    except OSError as exc:
        message = f"cannot read {str(resolved)!r}: {exc.strerror or type(exc).__name__}"
        raise ConfigError([Problem(where, "jwks-file", message)]) from None
    except (ValueError, JoseError, KeyError, TypeError) as exc:
        message = (
            f'{str(resolved)!r} is not a JWKS document ({{"keys": [...]}}): '
            f"{_reason(exc) if isinstance(exc, JoseError) else exc}"
        )
        raise ConfigError([Problem(where, "jwks-file", message)]) from None
    if any(key.is_private for key in keys.keys):
        message = f"{str(resolved)!r} holds private keys; the gateway needs only the public ones"
        raise ConfigError([Problem(where, "jwks-file", message)])
    return keys


def _reason(exc: JoseError) -> str:
    return exc.description or exc.error
