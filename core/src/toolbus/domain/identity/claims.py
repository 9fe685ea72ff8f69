"""A call token's claims: what a trusted caller vouches for, checked against the call.

A token is made for exactly one call: its ``jti`` is the call's ``id`` property,
its ``aud`` the service (id or request queue) it is sent to, and ``req`` the
SHA-256 of the request body. So a token copied onto another call, another
service or another body is refused, and the ``user`` in the body must be the
token's ``sub``. ``iat``/``nbf``/``exp`` bound its life to a short window.
"""

from __future__ import annotations

import base64
import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from toolbus.domain.errors import Unauthorized

#: The message property that carries the call token (a JWS compact string).
PROP_CALL_TOKEN = "call-token"
#: Private claims: the groups granted to the user, and the digest of the request body.
CLAIM_GROUPS = "groups"
CLAIM_BODY = "req"


class Caller(NamedTuple):
    """Who a call is for, as the serving tool sees it.

    ``verified`` is True only when a call token signed by a trusted key vouched
    for ``user`` and ``groups``; otherwise ``user`` is the unverified claim in
    the request body and ``groups`` is empty.
    """

    user: str
    groups: tuple[str, ...] = ()
    verified: bool = False
    #: The id of the key that signed the token ("" when unverified).
    key_id: str = ""


def body_digest(body: bytes) -> str:
    """The ``req`` claim: base64url (unpadded) SHA-256 of the request body."""
    return base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()


def call_claims(
    *,
    user: str,
    groups: Sequence[str],
    audience: str,
    call_id: str,
    body: bytes,
    now: float,
    lifetime: float,
    issuer: str = "",
) -> dict[str, Any]:
    """The claims a caller signs for one call, valid from ``now`` for ``lifetime`` seconds."""
    issued = int(now)
    claims: dict[str, Any] = {
        "sub": user,
        CLAIM_GROUPS: list(groups),
        "aud": audience,
        "jti": call_id,
        CLAIM_BODY: body_digest(body),
        "iat": issued,
        "nbf": issued,
        # Rounded up: a lifetime is never cut short by whole-second claims.
        "exp": math.ceil(now + lifetime),
    }
    if issuer:
        claims["iss"] = issuer
    return claims


def _text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise Unauthorized(f"call token has no valid '{name}' claim")
    return value


def _time(claims: Mapping[str, Any], name: str) -> float:
    value = claims.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise Unauthorized(f"call token has no valid '{name}' claim")
    return float(value)


def check_claims(
    claims: Mapping[str, Any],
    *,
    audiences: Collection[str],
    call_id: str,
    user: str,
    body: bytes,
    now: float,
    leeway: float,
    key_id: str = "",
) -> Caller:
    """The verified caller, when the claims fit this call at ``now``; else :class:`Unauthorized`.

    ``leeway`` seconds of clock difference between caller and service are forgiven.
    """
    expires = _time(claims, "exp")
    if now - leeway >= expires:
        raise Unauthorized("call token has expired; the caller must sign each call afresh")
    if "nbf" in claims and now + leeway < _time(claims, "nbf"):
        raise Unauthorized("call token is not valid yet; check the caller's and service's clocks")
    if "iat" in claims and now + leeway < _time(claims, "iat"):
        raise Unauthorized("call token was issued in the future; check the clocks")
    audience = claims.get("aud")
    granted = [audience] if isinstance(audience, str) else audience
    if not isinstance(granted, list) or not any(a in audiences for a in granted):
        raise Unauthorized("call token is for another tool service")
    if _text(claims, "jti") != call_id:
        raise Unauthorized("call token is for another call id")
    if claims.get(CLAIM_BODY) != body_digest(body):
        raise Unauthorized("call token is for another request body")
    subject = claims.get("sub")
    if not isinstance(subject, str):
        raise Unauthorized("call token has no valid 'sub' claim")
    if subject != user:
        raise Unauthorized(
            f"request body names user {user!r} but the call token is for {subject!r}"
        )
    groups = claims.get(CLAIM_GROUPS, [])
    if not isinstance(groups, list) or not all(isinstance(g, str) for g in groups):
        raise Unauthorized(f"call token claim '{CLAIM_GROUPS}' must be a list of group names")
    return Caller(subject, tuple(groups), True, key_id)
