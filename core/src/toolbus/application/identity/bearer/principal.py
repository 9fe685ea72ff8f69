"""Who a bearer credential names, and the ways a credential is refused."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from toolbus.domain.config.descriptors import DEFAULT_GROUP
from toolbus.domain.config.registry import WILDCARD
from toolbus.domain.errors import ToolbusError

#: Why a credential was refused: the ``reason`` of an answer and of the failure metrics.
FailureReason = Literal[
    "missing",
    "unknown-key",
    "expired",
    "bad-signature",
    "invalid-token",
    "no-user",
    "insufficient-scope",
]
Method = Literal["api-key", "jwt"]


class AuthFailure(Exception):
    """The request is not authenticated (HTTP 401).

    ``message`` says what to fix and never echoes the credential.
    """

    def __init__(self, reason: FailureReason, message: str) -> None:
        super().__init__(message)
        self.reason: FailureReason = reason
        self.message = message


class InsufficientScope(AuthFailure):
    """The token is valid, but its scopes do not reach the groups asked for (HTTP 403).

    ``scopes`` are the scopes that would reach them: what the client asks its
    identity provider for next (RFC 6750's ``scope`` attribute).
    """

    def __init__(self, denied: Sequence[str], scopes: Sequence[str]) -> None:
        named = ", ".join(map(repr, denied))
        hint = (
            f"a token with scope {' or '.join(map(repr, scopes))} reaches them"
            if scopes
            else "no scope reaches them"
        )
        super().__init__(
            "insufficient-scope", f"the token's scopes do not reach group(s) {named}; {hint}"
        )
        self.denied = tuple(denied)
        self.scopes = tuple(scopes)


class KeysUnavailable(ToolbusError):
    """The identity provider's keys cannot be had now: tokens cannot be checked (HTTP 503)."""


@dataclass(frozen=True, slots=True)
class Principal:
    """Who authenticated: the user, how they proved it, and which credential.

    ``reach`` is what the token's scopes let it ask for: the tool groups
    (``"*"``: all), or ``None`` when scopes do not limit it (an API key, a
    door whose tokens carry no scopes it maps).
    """

    user: str
    method: Method
    #: The API key's label, or the JWT's issuer; never the credential itself.
    credential: str
    scopes: frozenset[str] = frozenset()
    reach: frozenset[str] | None = None
    #: Scope -> the groups it reaches, to say which scope a refused request needs.
    scope_groups: Mapping[str, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def within(self, groups: Iterable[str] | None) -> None:
        """Refuse (:class:`InsufficientScope`) groups beyond the token's scopes.

        ``None`` means ``["default"]``, as everywhere; what the user's
        permissions allow is the front door's check, after this one.
        """
        if self.reach is None:
            return
        asked = [DEFAULT_GROUP] if groups is None else list(groups)
        denied = [group for group in dict.fromkeys(asked) if not self._reaches(group)]
        if denied:
            raise InsufficientScope(denied, self._scopes_reaching(denied))

    def narrowed(self, allowed: Iterable[str]) -> tuple[str, ...]:
        """``allowed`` (a user's permitted groups) as far as the token's scopes reach."""
        groups = tuple(allowed)
        if self.reach is None or WILDCARD in self.reach:
            return groups
        if WILDCARD in groups:
            return tuple(sorted(self.reach))
        return tuple(group for group in groups if group in self.reach)

    def _reaches(self, group: str) -> bool:
        assert self.reach is not None
        return WILDCARD in self.reach or (group != WILDCARD and group in self.reach)

    def _scopes_reaching(self, denied: Sequence[str]) -> list[str]:
        return [
            scope
            for scope, groups in self.scope_groups.items()
            if WILDCARD in groups or (WILDCARD not in denied and set(denied) <= set(groups))
        ]
