"""The rules every state store checks its arguments by, so that all of them word a
bad namespace, key, TTL or value the same way.

A namespace is a lower-case letter, then lower-case letters, digits and ``-``
(at most 64 characters): it maps unchanged onto a NATS subject token and a Redis
key segment, and cannot hold either's separator. A key is any non-empty text that
can be written as UTF-8; each store escapes it for its engine.
"""

from __future__ import annotations

import math
import re

from toolbus.domain.errors import StateKeyError, StateValueTooLarge

_NAMESPACE = re.compile(r"[a-z][a-z0-9-]{0,63}")


def check_namespace(namespace: str) -> str:
    """``namespace`` if a store may hold it, else a :class:`StateKeyError` saying why."""
    if isinstance(namespace, str) and _NAMESPACE.fullmatch(namespace):
        return namespace
    raise StateKeyError(
        f"state namespace {namespace!r} is not a lower-case letter followed by lower-case "
        "letters, digits and '-' (at most 64 characters); name it like 'gateway-sessions'"
    )


def key_bytes(key: str) -> bytes:
    """``key`` as UTF-8, or a :class:`StateKeyError` for an empty or unwritable key.

    The key is not repeated in the message: it may be a token id or a user's name.
    """
    if not isinstance(key, str):
        raise StateKeyError(f"a state key must be text, not {type(key).__name__}")
    if not key:
        raise StateKeyError("a state key must not be empty")
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError:
        raise StateKeyError(
            "a state key must be valid text (it holds a lone surrogate, which UTF-8 "
            "cannot write); decode keys from bytes with errors='strict'"
        ) from None


def check_ttl(ttl: float | None) -> float | None:
    """``ttl`` if it is ``None`` or a finite number of seconds above 0, else a ValueError."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, int | float):
        raise ValueError(f"a state TTL must be a number of seconds, not {type(ttl).__name__}")
    if not (math.isfinite(ttl) and ttl > 0):
        raise ValueError(
            "a state TTL must be a finite number of seconds above 0; "
            "leave it out (None) to keep the value until it is deleted"
        )
    return float(ttl)


def check_value(value: bytes, limit: int | None, how_to_raise: str) -> None:
    """A :class:`StateValueTooLarge` when ``value`` exceeds ``limit``; a TypeError unless bytes."""
    if not isinstance(value, bytes | bytearray):
        raise TypeError(
            f"a state value must be bytes, not {type(value).__name__}; serialise it first"
        )
    if limit is not None and len(value) > limit:
        raise StateValueTooLarge(len(value), limit, how_to_raise)
