"""Signing calls: a :class:`CallSigner` puts a call token on every request a client sends."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from toolbus.application.identity.caller import granted_groups
from toolbus.application.identity.keys import (
    SigningKeyError,
    algorithm_for,
    as_key,
    jose,
    load_key,
    signs_with,
)
from toolbus.domain.identity import base64url, call_claims

if TYPE_CHECKING:
    from joserfc.jwk import Key

#: Seconds a token stays valid: long enough for a queued call, short enough to be useless later.
DEFAULT_LIFETIME = 60.0


class CallSigner:
    """Signs one call token per call with one private key (or shared secret).

    Give it to a client, ``ToolServiceClient(bus, signer=signer)``: every call
    that client sends then carries a token for its user, the granted groups
    (:func:`~toolbus.application.identity.granting`, else ``groups``), the
    service and call id it is for, and a digest of its body.
    """

    def __init__(
        self,
        key: Key | Mapping[str, Any],
        *,
        groups: Sequence[str] = (),
        lifetime: float = DEFAULT_LIFETIME,
        issuer: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        if isinstance(groups, str):
            raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
        if lifetime <= 0:
            raise ValueError("lifetime must be a positive number of seconds")
        _, jws = jose()
        from joserfc.util import json_b64encode

        key = as_key(key)
        if not key.is_private and key.key_type != "oct":
            raise SigningKeyError(
                f"key {key.kid!r} is a public key; a signer needs the private key"
            )
        key.ensure_kid()
        self.key = key
        self.algorithm = algorithm_for(key)
        self.key_id = str(key.kid)
        self.groups = tuple(groups)
        self.lifetime = lifetime
        self.issuer = issuer
        self.clock = clock
        # The header, the algorithm and the key are the same for every token: the
        # library checks them here, once, and each call only signs its claims.
        header = {"alg": self.algorithm, "kid": self.key_id, "typ": "JWT"}
        registry = jws.JWSRegistry(algorithms=[self.algorithm])
        registry.check_header(header)
        algorithm = registry.get_alg(self.algorithm)
        try:
            algorithm.check_key(key)
            self._sign = signs_with(key, algorithm)
        except Exception as exc:  # e.g. a key whose "use" or "key_ops" rule out signing
            raise SigningKeyError(
                f"key {self.key_id!r} cannot sign ({type(exc).__name__}); give a signing key"
            ) from None
        self._header_segment = json_b64encode(header) + b"."

    @classmethod
    def load(
        cls, source: str, *, environ: Mapping[str, str] | None = None, **options: Any
    ) -> CallSigner:
        """A signer with the key in ``source`` (a file, or ``env:NAME``)."""
        return cls(load_key(source, environ), **options)

    def sign(
        self,
        *,
        call_id: str,
        audience: str,
        user: str,
        body: bytes,
        properties: Mapping[str, str] | None = None,
    ) -> str:
        """The call token for one request (a JWS compact string).

        ``properties`` are the message properties the request is sent with:
        the token covers those that steer the call (``deadline``, ``env-args``,
        ``attempt``), so they must be final when it is signed.
        """
        groups = granted_groups()
        claims = call_claims(
            user=user,
            groups=self.groups if groups is None else groups,
            audience=audience,
            call_id=call_id,
            body=body,
            now=self.clock(),
            lifetime=self.lifetime,
            issuer=self.issuer,
            properties=properties,
        )
        # JWS compact serialisation (RFC 7515 section 7.1) with the header encoded once.
        # orjson: compact JSON, as json.dumps writes it, in an eighth of the time.
        signing_input = self._header_segment + base64url.encode(orjson.dumps(claims))
        return (signing_input + b"." + base64url.encode(self._sign(signing_input))).decode()

    def __repr__(self) -> str:  # never the key material
        return f"<CallSigner kid={self.key_id!r} alg={self.algorithm}>"
