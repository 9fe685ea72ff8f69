"""Signed configuration: a document an operator's key vouches for, as one JWS string.

Anything on the bus may be written by anyone who can publish there, the
config service's items included. A front door therefore takes policy (the
``permissions`` section) from the bus only when the operator asked it to and
the item is *signed* by an operator key: :func:`sign_document` makes the
string an operator puts, :class:`DocumentVerifier` checks it where it is used.

The token is a JWS compact string (joserfc; the key types and algorithms of
call tokens, :mod:`toolbus.application.identity.keys`) whose payload is
``{"purpose": ..., "issued_at": ..., "document": {...}}``. The purpose keeps a
document signed for one use from being accepted for another; the signing time
lets a reader refuse a document older than one it has already taken (an old
signed item put back on the bus).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from toolbus.application.identity.keys import algorithm_for, as_key, jose, load_keys
from toolbus.application.identity.verifying import Signatures
from toolbus.domain.errors import Unauthorized

if TYPE_CHECKING:
    from joserfc.jwk import Key

#: The purpose of a signed ``permissions`` section.
PERMISSIONS_PURPOSE = "toolbus-permissions"


def sign_document(
    document: Mapping[str, Any],
    key: Key | Mapping[str, Any],
    *,
    purpose: str,
    issued_at: float | None = None,
) -> str:
    """``document`` signed with the operator's private ``key`` for ``purpose``."""
    _, jws = jose()
    key = as_key(key)
    key.ensure_kid()
    algorithm = algorithm_for(key)
    payload = {
        "purpose": purpose,
        "issued_at": time.time() if issued_at is None else issued_at,
        "document": dict(document),
    }
    header = {"alg": algorithm, "kid": str(key.kid)}
    token: str = jws.serialize_compact(
        header,
        json.dumps(payload, separators=(",", ":")),
        key,
        registry=jws.JWSRegistry(algorithms=[algorithm]),
    )
    return token


@dataclass(frozen=True, slots=True)
class SignedDocument:
    """A verified document: what it says, who signed it, when."""

    document: dict[str, Any]
    key_id: str
    issued_at: float


class DocumentVerifier:
    """Checks signed documents against the operator's public keys."""

    def __init__(self, keys: Iterable[Key | Mapping[str, Any]]) -> None:
        self._signatures = Signatures(keys, what="signed document")

    @classmethod
    def load(
        cls, sources: Iterable[str], environ: Mapping[str, str] | None = None
    ) -> DocumentVerifier:
        """A verifier trusting every key in ``sources`` (files, or ``env:NAME``)."""
        return cls(load_keys(sources, environ))

    def verify(self, token: object, *, purpose: str) -> SignedDocument:
        """The document ``token`` carries, or :class:`~toolbus.domain.errors.Unauthorized`."""
        if not isinstance(token, str):
            raise Unauthorized("a signed document must be a JWS compact string")
        key_id, payload = self._signatures.verified(token)
        if payload.get("purpose") != purpose:
            raise Unauthorized(f"the document was signed for another purpose, not {purpose!r}")
        document, issued = payload.get("document"), payload.get("issued_at")
        if not isinstance(document, dict) or not isinstance(issued, int | float):
            raise Unauthorized("the signed document has no document or signing time")
        return SignedDocument(document, key_id, float(issued))
