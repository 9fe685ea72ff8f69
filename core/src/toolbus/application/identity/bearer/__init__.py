"""Who calls an HTTP front door: bearer API keys and an identity provider's access tokens.

The gateway and ``toolbus mcp serve --transport http`` authenticate callers
the same way, with these pieces:

* :class:`Authenticator`: an API key of the credential table, or a JWT
  (:class:`JwtVerifier`), names a :class:`Principal`;
* :class:`ProviderKeys`: an identity provider's signing keys, read from its
  JWKS URL (or discovered from its issuer), cached, refreshed, and fetched
  again when a token names a key the door does not hold yet;
* :class:`ProtectedResource`: the door's RFC 9728 metadata and the
  ``WWW-Authenticate`` challenges that name it;
* :class:`TokenSettings`: the ``[gateway.jwt]`` / ``[mcp.jwt]`` table.

It needs joserfc and httpx: ``pip install 'toolbus[oauth]'`` (the gateway and
the MCP bridge bring it). See docs/gateway.md#logging-in.
"""

try:
    import httpx  # noqa: F401
    import joserfc  # noqa: F401
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError(
        "authenticating bearer tokens needs httpx and joserfc: pip install 'toolbus[oauth]'"
    ) from exc

from toolbus.application.identity.bearer.authenticator import Authenticator
from toolbus.application.identity.bearer.principal import (
    AuthFailure,
    FailureReason,
    InsufficientScope,
    KeysUnavailable,
    Principal,
)
from toolbus.application.identity.bearer.provider_keys import ProviderKeys, StaticKeys
from toolbus.application.identity.bearer.resource import ProtectedResource, challenge
from toolbus.application.identity.bearer.settings import TokenSettings, parse_token_settings
from toolbus.application.identity.bearer.tokens import JwtVerifier, KeysNotAtHand

__all__ = [
    "AuthFailure",
    "Authenticator",
    "FailureReason",
    "InsufficientScope",
    "JwtVerifier",
    "KeysNotAtHand",
    "KeysUnavailable",
    "Principal",
    "ProtectedResource",
    "ProviderKeys",
    "StaticKeys",
    "TokenSettings",
    "challenge",
    "parse_token_settings",
]
