"""The token table of an HTTP front door: ``[gateway.jwt]``, ``[mcp.jwt]`` in ``toolbus.toml``.

::

    [gateway.jwt]                       # or [mcp.jwt] for toolbus mcp serve --transport http
    issuer = "https://login.example/realms/tools"   # required "iss"
    discover = true                     # keys from the issuer's .well-known/openid-configuration
    # jwks-url = "https://login.example/realms/tools/protocol/openid-connect/certs"
    # jwks-file = "jwks.json"           # or a JWKS document read once, at start
    resource = "https://tools.example"  # this door's URL: the audience tokens must name,
                                        # and what /.well-known/oauth-protected-resource says
    audience = "toolbus"                # optional: another accepted "aud" (a provider that
                                        # cannot put the resource URL in "aud")
    user-claim = "preferred_username"   # the claim that names the user (default "sub")
    leeway = 30                         # seconds of clock skew tolerated on exp/nbf/iat
    max-age = 3600                      # optional: refuse tokens issued longer ago
    keys-refresh = 300                  # seconds between key fetches when the provider's
                                        # answer has no caching headers
    keys-max-stale = 86400              # how long the last good keys serve while the
                                        # provider cannot be reached
    secret-env = "TOOLBUS_JWT_SECRET"   # HS256 shared secret, or secret-file = "..."

    [gateway.jwt.scopes]                # scope -> the tool groups a token with it reaches
    "tools:read" = ["default"]
    "tools:admin" = ["*"]

The keys of a provider, the claims a token must carry and the scopes are the
same at every door: each door reads its own table with this model, so that a
door's resource (its audience) is its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from toolbus.domain.errors import ConfigError, Problem


class TokenSettings(BaseModel):
    """Where a door's token keys are, what a token must say, and what its scopes reach."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    secret_env: str | None = Field(None, alias="secret-env", min_length=1)
    secret_file: str | None = Field(None, alias="secret-file", min_length=1)
    jwks_file: str | None = Field(None, alias="jwks-file", min_length=1)
    jwks_url: str | None = Field(None, alias="jwks-url", min_length=1)
    discover: bool = False
    issuer: str | None = Field(None, min_length=1)
    audience: str | None = Field(None, min_length=1)
    resource: str | None = Field(None, min_length=1)
    authorization_servers: tuple[str, ...] | None = Field(
        None, alias="authorization-servers", min_length=1
    )
    user_claim: str = Field("sub", alias="user-claim", min_length=1)
    leeway: int = Field(30, ge=0, le=3600)
    max_age: int | None = Field(None, alias="max-age", gt=0)
    keys_refresh: float = Field(300.0, alias="keys-refresh", gt=0)
    keys_max_stale: float = Field(86400.0, alias="keys-max-stale", ge=0)
    scopes: dict[str, tuple[str, ...]] = Field(default_factory=dict)

    @field_validator("scopes")
    @classmethod
    def _scopes_name_groups(cls, value: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        for scope, groups in value.items():
            if not scope or " " in scope:
                raise ValueError(f"scope {scope!r} must be one word (scopes are space-separated)")
            if not groups or any(not group for group in groups):
                raise ValueError(f"scope {scope!r} must name the tool groups it reaches")
        return value

    @property
    def provider_keys(self) -> bool:
        """Whether tokens are signed by an identity provider's keys (a file, a URL, discovery)."""
        return bool(self.jwks_file or self.jwks_url or self.discover)


def parse_token_settings(table: Mapping[str, Any], *, where: str) -> TokenSettings:
    """Validate a token table; :class:`ConfigError` lists every problem, named under ``where``."""
    try:
        return TokenSettings.model_validate(dict(table))
    except ValidationError as exc:
        raise ConfigError(
            Problem(where, ".".join(str(part) for part in error["loc"]), _message(error))
            for error in exc.errors()
        ) from None


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "is not a token setting; see docs/gateway.md#logging-in for the list"
    return str(error["msg"]).removeprefix("Value error, ")
