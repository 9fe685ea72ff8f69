"""Gateway-side authorization: may this user ask for these tool groups? (docs/access-control.md)."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from toolbus.domain.config.registry import WILDCARD, normalize_groups
from toolbus.domain.errors import AccessDenied


def check_access(
    user: str, requested: Sequence[str] | None, allowed: Collection[str]
) -> tuple[str, ...]:
    """Return the requested groups after defaulting, or raise :class:`AccessDenied`.

    ``requested`` ``None`` means ``["default"]``, so a user needs ``"default"``
    allowed to send requests without groups. An empty list asks for no tools and
    is always permitted. Asking for ``"*"`` (every tool) needs ``"*"`` among the
    allowed groups, and an allowed ``"*"`` permits any request. The error names
    every refused group, in the order requested.
    """
    groups = normalize_groups(requested)
    if isinstance(allowed, str):
        # A bare string is a collection of letters; refusing it beats a baffling denial.
        raise TypeError(f"allowed groups must be a collection of names, not the string {allowed!r}")
    if WILDCARD in allowed:
        return groups
    denied = tuple(dict.fromkeys(g for g in groups if g not in allowed))
    if not denied:
        return groups
    if WILDCARD in denied:
        others = [g for g in denied if g != WILDCARD]
        also = f" (nor group(s) {', '.join(map(repr, others))})" if others else ""
        raise AccessDenied(
            f"user {user!r} may not request every tool group with '*'{also}; that needs '*' "
            "among the user's allowed groups. Request only allowed groups, or ask an "
            "administrator to grant them",
            user=user,
            denied=denied,
        )
    raise AccessDenied(user=user, denied=denied)
