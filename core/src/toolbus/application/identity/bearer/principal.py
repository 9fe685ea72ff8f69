"""Who a bearer credential names, and the ways a credential is refused."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
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
_NO_SCOPE_TABLE: Mapping[str, tuple[str, ...]] = MappingProxyType({})


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
    scope_groups: Mapping[str, tuple[str, ...]] = field(
        default_factory=lambda: _NO_SCOPE_TABLE, repr=False, compare=False
    )

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
        return scopes_reaching(self.scope_groups, denied)


def scopes_reaching(
    scope_groups: Mapping[str, Sequence[str]], groups: Iterable[str] | None
) -> list[str]:
    """The fewest scopes (of ``scope -> groups``) that together reach ``groups``, in the
    table's order; among as few, those naming the groups before those reaching ``"*"``.

    What a client should ask its identity provider for, and no more (``None``
    means ``["default"]``); groups no scope reaches are left out.
    """
    asked = {DEFAULT_GROUP} if groups is None else set(groups)
    reachable = {g for g in asked if any(_names(r, g) for r in scope_groups.values())}
    if not reachable:
        return []
    useful = [s for s, reached in scope_groups.items() if any(_names(reached, g) for g in asked)]
    # Naming scopes first, so that among as few scopes they are tried before "*".
    useful.sort(key=lambda scope: WILDCARD in scope_groups[scope])
    if len(useful) <= _EXHAUSTIVE:
        for size in range(1, len(useful) + 1):
            for chosen in itertools.combinations(useful, size):
                if all(any(_names(scope_groups[s], g) for s in chosen) for g in reachable):
                    return [scope for scope in scope_groups if scope in chosen]
    picked: list[str] = []  # a table too large to try every choice: one scope per group
    for group in sorted(reachable):
        if not any(_names(scope_groups[s], group) for s in picked):
            picked.append(next(s for s in useful if _names(scope_groups[s], group)))
    return [scope for scope in scope_groups if scope in picked]


#: Scope tables up to this size are searched for the fewest scopes; larger ones greedily.
_EXHAUSTIVE = 12


def _names(reached: Sequence[str], group: str) -> bool:
    return WILDCARD in reached or (group != WILDCARD and group in reached)
