"""``toolbus a2a serve``'s table of ``toolbus.toml``: ``[a2a]``.

::

    [a2a.jwt]                           # accept an identity provider's access tokens
    issuer = "https://login.example/realms/tools"
    discover = true
    resource = "https://agents.example"   # the URL A2A clients reach the door at

The token table is every HTTP door's
(:mod:`toolbus.application.identity.bearer.settings`); the gateway reads its
own from ``[gateway.jwt]`` and the MCP door from ``[mcp.jwt]``, so that each
door's resource is its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from toolbus.application.identity.bearer import Authenticator, TokenSettings
from toolbus.application.identity.credentials import load_credentials
from toolbus.domain.errors import ConfigError, Problem
from toolbus.settings import Settings

SECTION = "a2a"
#: The door's name in messages about its settings.
DOOR_NAME = "toolbus a2a serve"


class A2ASettings(BaseModel):
    """What ``toolbus.toml`` says about the A2A door."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jwt: TokenSettings | None = None


def parse_a2a_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [a2a]"
) -> A2ASettings:
    """Validate the ``[a2a]`` table; :class:`ConfigError` lists every problem."""
    try:
        return A2ASettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(where, ".".join(str(part) for part in error["loc"]), _message(error))
            for error in exc.errors()
        ) from None


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "is not an A2A setting; see docs/a2a.md#logging-in"
    return str(error["msg"]).removeprefix("Value error, ")


def door_authenticator(settings: Settings) -> Authenticator:
    """Who callers are: the API keys of ``[credentials]``, and the identity provider's
    tokens of ``[a2a.jwt]``; :class:`ConfigError` when there is neither."""
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    table = load_credentials(None, settings.file, base_dir=base)
    tokens = parse_a2a_settings(settings.file.get(SECTION)).jwt
    if (table is None or not len(table)) and tokens is None:
        raise ConfigError(
            [
                Problem(
                    DOOR_NAME,
                    "",
                    "needs a way to authenticate callers: add [[credentials.api-keys]] "
                    "entries to toolbus.toml (each names the user the key is for), or an "
                    "identity provider's tokens under [a2a.jwt] (docs/a2a.md#logging-in)",
                )
            ]
        )
    return Authenticator.from_settings(
        table if table else None,
        tokens,
        where="toolbus.toml [a2a.jwt]",
        door=DOOR_NAME,
        base_dir=base,
    )
