"""A call token's claims: what a trusted caller vouches for, checked against the call.

A token is made for exactly one call: its ``jti`` is the call's ``id`` property,
its ``aud`` the service (id or request queue) it is sent to, ``req`` the
SHA-256 of the request body, and ``prp`` the message properties that steer the
call, as sent (:data:`BOUND_PROPERTIES`: which environment values fill which
arguments, how long the call may run, which try of the call this is). So
a token copied onto another call, another service, another body or other
steering properties is refused, and the ``user`` in the body must be the
token's ``sub``. ``iat``/``nbf``/``exp`` bound its life to a short window,
checked at the moment the broker took the call where the broker says when
(a call that waited in a persistent queue is not refused for having waited).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from toolbus.domain.errors import Unauthorized
from toolbus.domain.identity import base64url

#: The message property that carries the call token (a JWS compact string).
PROP_CALL_TOKEN = "call-token"
#: Private claims: the groups granted to the user, the digest of the request body,
#: and the digest of the properties that steer the call.
CLAIM_GROUPS = "groups"
CLAIM_BODY = "req"
CLAIM_PROPERTIES = "prp"
#: Message properties that change what the tool does or how long it may run:
#: a token covers them, so nobody on the way can add, drop or change one.
#: (``env-args``: which of the service's environment values fill which arguments;
#: ``deadline``: when the caller stops waiting; ``attempt``: which try of the
#: call this is, so that a retry's fresh token is not taken for a replay.)
BOUND_PROPERTIES = ("env-args", "deadline", "attempt")


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
    return base64url.encode(hashlib.sha256(body).digest()).decode()


def bound_properties(properties: Mapping[str, str] | None) -> dict[str, str]:
    """The ``prp`` claim: the :data:`BOUND_PROPERTIES` among ``properties``, as they are.

    In clear rather than hashed: the values are short (a deadline, an attempt
    number, a map of argument to variable names, never a secret), and a
    comparison costs less than a digest on both sides of every call.
    """
    if not properties:
        return {}
    bound = {}
    for name in BOUND_PROPERTIES:  # a loop: a comprehension costs half as much again
        if name in properties:
            bound[name] = properties[name]
    return bound


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
    properties: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The claims a caller signs for one call, valid from ``now`` for ``lifetime`` seconds.

    ``properties`` are the message properties the call is sent with; those in
    :data:`BOUND_PROPERTIES` are covered by the token.
    """
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
    steering = bound_properties(properties)
    if steering:
        claims[CLAIM_PROPERTIES] = steering
    if issuer:
        claims["iss"] = issuer
    return claims


#: The claims a token must not be valid before, and what is said when it is.
_NOT_BEFORE = (
    ("nbf", "call token is not valid yet; check the caller's and service's clocks"),
    ("iat", "call token was issued in the future; check the clocks"),
)
_ABSENT = object()
_NO_PROPERTIES: dict[str, str] = {}
_NO_GROUPS: list[str] = []
_GROUPS_REFUSED = f"call token claim '{CLAIM_GROUPS}' must be a list of group names"


def _text(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if not isinstance(value, str) or not value:
        raise Unauthorized(f"call token has no valid '{name}' claim")
    return value


def _time(claims: Mapping[str, Any], name: str) -> float:
    value: Any = claims.get(name)
    # Exactly a JSON number: True is no time, nor is NaN or infinity.
    kind = type(value)
    if kind is int or (kind is float and math.isfinite(value)):
        return float(value)
    raise Unauthorized(f"call token has no valid '{name}' claim")


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
    properties: Mapping[str, str] | None = None,
) -> Caller:
    """The verified caller, when the claims fit this call at ``now``; else :class:`Unauthorized`.

    ``now`` is when the token must have been valid: the moment the broker took
    the call, where known. ``leeway`` seconds of clock difference between
    caller and service are forgiven. ``properties`` are the message's; the
    bound ones must be exactly those the token covers.
    """
    get = claims.get
    # The claims a toolbus signer writes take the first branch of each check; any
    # other form takes the full check, with its own message.
    expires = get("exp")
    if type(expires) is not int:
        expires = _time(claims, "exp")
    if now - leeway >= expires:
        raise Unauthorized("call token has expired; the caller must sign each call afresh")
    late = now + leeway
    for name, message in _NOT_BEFORE:
        when = get(name, _ABSENT)
        if when is not _ABSENT:
            if type(when) is not int:
                when = _time(claims, name)
            if late < when:
                raise Unauthorized(message)
    audience = get("aud")
    if type(audience) is str:  # the usual case, without a list made for it
        if audience not in audiences:
            raise Unauthorized("call token is for another tool service")
    elif not isinstance(audience, list) or not any(a in audiences for a in audience):
        raise Unauthorized("call token is for another tool service")
    if (get("jti") != call_id or not call_id) and _text(claims, "jti") != call_id:
        raise Unauthorized("call token is for another call id")
    if get(CLAIM_BODY) != body_digest(body):
        raise Unauthorized("call token is for another request body")
    if get(CLAIM_PROPERTIES, _NO_PROPERTIES) != bound_properties(properties):
        present = [name for name in BOUND_PROPERTIES if properties and name in properties]
        raise Unauthorized(
            "call token does not cover the call's properties "
            f"({', '.join(present) or 'none'}); they were changed, added or dropped on the way"
        )
    subject = get("sub")
    if not isinstance(subject, str):
        raise Unauthorized("call token has no valid 'sub' claim")
    if subject != user:
        raise Unauthorized(
            f"request body names user {user!r} but the call token is for {subject!r}"
        )
    groups = get(CLAIM_GROUPS, _NO_GROUPS)
    if not isinstance(groups, list):
        raise Unauthorized(_GROUPS_REFUSED)
    for group in groups:  # a loop, not all(): no generator made per call
        if not isinstance(group, str):
            raise Unauthorized(_GROUPS_REFUSED)
    return Caller(subject, tuple(groups), True, key_id)
