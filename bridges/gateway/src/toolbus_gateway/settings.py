"""The gateway's settings: the ``[gateway]`` table of ``toolbus.toml``.

::

    [gateway]
    listen = "127.0.0.1:8080"
    max-body-bytes = 1048576        # larger request bodies answer 413
    max-event-streams = 10000       # open SSE streams in all; beyond this, 429
    call-timeout = 30               # seconds per tool call
    stream-send-timeout = 10        # seconds an event stream waits on a client that stopped reading
    console-users = ["ops"]         # who may open the console (default: users allowed "*")
    console-session-ttl = 28800     # seconds a console log-in lasts
    console-key-env = "CONSOLE_KEY" # signs console sessions (default: a key of this process;
                                    # give replicas one key so that each reads the others')
    tls-proxy-header = "X-Forwarded-Proto"  # a proxy that ends TLS says "https" here
    metrics = "redacted"            # /metrics without a credential, tool, group, state and
                                    # service names left out; "operators": full, for operators
    sign-key = "env:GATEWAY_KEY"    # sign each call for services that verify callers
                                    # (a key source: a JWK or PEM file, or env:NAME)

    [gateway.jwt]                   # optional: accept an identity provider's tokens
    issuer = "https://login.example/realms/tools"
    discover = true                 # keys from the issuer's openid-configuration (or jwks-url,
                                    # jwks-file, secret-env / secret-file for HS256)
    resource = "https://tools.example"  # this gateway's URL: the audience tokens must name

The whole token table: :mod:`toolbus.application.identity.bearer.settings`.
API keys live in ``[[credentials.api-keys]]`` (see
:mod:`toolbus.application.identity.credentials`). Per-user limits and idle
sessions are every front door's: ``[doors]`` (docs/access-control.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from toolbus.application.identity.bearer.settings import TokenSettings
from toolbus.domain.errors import ConfigError, Problem

SECTION = "gateway"
DEFAULT_LISTEN = "127.0.0.1:8080"


class _Table(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class GatewaySettings(_Table):
    """Limits and authentication of one gateway. Every field has a sensible default."""

    listen: str = DEFAULT_LISTEN
    max_body_bytes: int = Field(1024 * 1024, alias="max-body-bytes", ge=1024)
    max_event_streams: int = Field(10_000, alias="max-event-streams", ge=1)
    call_timeout: float = Field(30.0, alias="call-timeout", gt=0)
    stream_send_timeout: float = Field(10.0, alias="stream-send-timeout", gt=0)
    console_users: tuple[str, ...] | None = Field(None, alias="console-users")
    console_session_ttl: float = Field(8 * 3600.0, alias="console-session-ttl", gt=0)
    console_key_env: str | None = Field(None, alias="console-key-env", min_length=1)
    tls_proxy_header: str | None = Field(None, alias="tls-proxy-header", min_length=1)
    metrics: Literal["redacted", "operators"] = "redacted"
    sign_key: str | None = Field(None, alias="sign-key", min_length=1)
    #: Tokens of an identity provider (the table is every HTTP door's: TokenSettings).
    jwt: TokenSettings | None = None


def parse_gateway_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [gateway]"
) -> GatewaySettings:
    """Validate the ``[gateway]`` table; :class:`ConfigError` lists every problem."""
    try:
        return GatewaySettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(where, ".".join(str(part) for part in error["loc"]), _message(error))
            for error in exc.errors()
        ) from None


#: Settings every front door shares now live in ``[doors]``.
MOVED_TO_DOORS = ("max-sessions-per-user", "session-idle-timeout")


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        if error["loc"] and error["loc"][-1] in MOVED_TO_DOORS:
            return "is a setting of every front door now: move it to [doors]"
        return "is not a gateway setting; see docs/gateway.md for the list"
    return str(error["msg"])
