"""How an OAuth client finds out how to log in to a door: RFC 9728 protected-resource metadata.

A door that accepts a provider's tokens describes itself at
``/.well-known/oauth-protected-resource`` (RFC 9728 §3; for a resource with a
path, such as ``https://tools.example/mcp``, also at
``/.well-known/oauth-protected-resource/mcp``): its resource identifier (the
audience its tokens must name, RFC 8707), the authorization servers that
issue them, and the scopes it understands. Every ``401`` names that document
in its ``WWW-Authenticate: Bearer resource_metadata="..."`` challenge, and a
``403`` for scopes that do not reach far enough says ``error="insufficient_scope"``
and which ``scope`` would (RFC 6750 §3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from toolbus.application.identity.bearer.settings import TokenSettings

WELL_KNOWN = "/.well-known/oauth-protected-resource"
#: The challenge of a door that publishes no metadata (API keys, a shared secret).
PLAIN_CHALLENGE = 'Bearer realm="toolbus"'


@dataclass(frozen=True, slots=True)
class ProtectedResource:
    """A door as an OAuth 2.0 protected resource: what its metadata document says."""

    #: The door's URL as clients reach it: its resource identifier and tokens' audience.
    resource: str
    authorization_servers: tuple[str, ...]
    scopes_supported: tuple[str, ...] = ()
    resource_name: str | None = None

    @classmethod
    def from_settings(cls, settings: TokenSettings, *, name: str) -> ProtectedResource | None:
        """The resource a token table describes; None when it sets no ``resource``."""
        if settings.resource is None:
            return None
        servers = settings.authorization_servers or (
            () if settings.issuer is None else (settings.issuer,)
        )
        return cls(settings.resource, tuple(servers), tuple(settings.scopes), name)

    @property
    def metadata_path(self) -> str:
        """Where the document is served (RFC 9728 §3.1: the well-known prefix, then the
        resource's path)."""
        path = urlsplit(self.resource).path.rstrip("/")
        return WELL_KNOWN + path

    @property
    def metadata_paths(self) -> tuple[str, ...]:
        """Every path the document is served at: RFC 9728's, and the bare well-known
        path that clients fall back to."""
        return tuple(dict.fromkeys((self.metadata_path, WELL_KNOWN)))

    @property
    def metadata_url(self) -> str:
        """The document's URL, as a ``401`` names it."""
        parts = urlsplit(self.resource)
        return f"{parts.scheme}://{parts.netloc}{self.metadata_path}"

    def document(self) -> dict[str, Any]:
        """The metadata, as JSON (RFC 9728 §2)."""
        document: dict[str, Any] = {
            "resource": self.resource,
            "authorization_servers": list(self.authorization_servers),
            "bearer_methods_supported": ["header"],
        }
        if self.scopes_supported:
            document["scopes_supported"] = list(self.scopes_supported)
        if self.resource_name is not None:
            document["resource_name"] = self.resource_name
        return document

    def challenge(
        self,
        *,
        error: str | None = None,
        description: str | None = None,
        scopes: Sequence[str] = (),
    ) -> str:
        """A ``WWW-Authenticate`` value naming the metadata (and the error, if any)."""
        return challenge(
            error=error, description=description, scopes=scopes, metadata_url=self.metadata_url
        )


def challenge(
    *,
    error: str | None = None,
    description: str | None = None,
    scopes: Sequence[str] = (),
    metadata_url: str | None = None,
) -> str:
    """A ``Bearer`` challenge (RFC 6750 §3, RFC 9728 §5.1); quotes and backslashes are
    escaped so that no text can end a parameter early."""
    parameters = [("realm", "toolbus")]
    if metadata_url is not None:
        parameters.append(("resource_metadata", metadata_url))
    if error is not None:
        parameters.append(("error", error))
    if description is not None:
        parameters.append(("error_description", description))
    if scopes:
        parameters.append(("scope", " ".join(scopes)))
    return "Bearer " + ", ".join(f'{name}="{_quoted(value)}"' for name, value in parameters)


def _quoted(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')
