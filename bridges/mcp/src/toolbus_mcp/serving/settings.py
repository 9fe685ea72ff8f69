"""``toolbus mcp serve``'s table of ``toolbus.toml``: ``[mcp]``.

::

    [mcp.jwt]                           # accept an identity provider's access tokens over HTTP
    issuer = "https://login.example/realms/tools"
    discover = true
    resource = "https://tools.example/mcp"   # the URL MCP clients reach the endpoint at

The token table is every HTTP door's
(:mod:`toolbus.application.identity.bearer.settings`); the gateway reads its
own from ``[gateway.jwt]``, so that each door's resource is its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from toolbus.application.identity.bearer import TokenSettings
from toolbus.domain.errors import ConfigError, Problem

SECTION = "mcp"


class McpSettings(BaseModel):
    """What ``toolbus.toml`` says about the MCP door."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jwt: TokenSettings | None = None


def parse_mcp_settings(
    table: Mapping[str, Any] | None, *, where: str = "toolbus.toml [mcp]"
) -> McpSettings:
    """Validate the ``[mcp]`` table; :class:`ConfigError` lists every problem."""
    try:
        return McpSettings.model_validate(dict(table or {}))
    except ValidationError as exc:
        raise ConfigError(
            Problem(where, ".".join(str(part) for part in error["loc"]), _message(error))
            for error in exc.errors()
        ) from None


def _message(error: Any) -> str:
    if error["type"] == "extra_forbidden":
        return "is not an MCP setting; see docs/mcp.md#logging-in"
    return str(error["msg"]).removeprefix("Value error, ")
