"""Who may ask for which tool groups: the permissions model (docs/access-control.md).

Permissions map each user to the tool groups they may request, with a
*fallback* for users configuration does not name. They are configuration, in
the same shape wherever they live::

    # snapshot (JSON file, or permissions.json in a config directory)
    {"permissions": {"users": {"alice": ["default", "research"], "ops": ["*"]},
                     "fallback": []}}

    # toolbus.toml
    [permissions]
    fallback = []
    [permissions.users]
    alice = ["default", "research"]
    ops = ["*"]

* ``"*"`` in a user's list permits every group, and is the only way to permit a
  request for ``"*"`` (every tool). It is never implied.
* ``fallback`` is what unknown users get; absent, it is ``[]``: nothing, so a
  user configuration forgot is locked out rather than let in.
* Where no ``permissions`` section exists at all, access control is off
  (:meth:`Permissions.unrestricted`): everyone may request anything. Adding the
  section, even an empty one, turns it on.
* ``signed`` (on the bus only) carries the section as a document signed by an
  operator key; it grants nothing by itself (:func:`signed_permissions`).

Parsing reports every problem at once, as one :class:`ConfigError` naming the
user and the field.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolbus.domain.access.check import check_access
from toolbus.domain.config.parsing import section_in_one_place
from toolbus.domain.config.registry import WILDCARD
from toolbus.domain.errors import AccessDenied, ConfigError, Problem

SECTION = "permissions"
USERS = "users"
FALLBACK = "fallback"
#: On the bus only: the section as a document signed by an operator key (a JWS
#: string). Only a front door told to trust the operator's keys reads it.
SIGNED = "signed"
_KEYS = (USERS, FALLBACK, SIGNED)


@dataclass(frozen=True, slots=True)
class Permissions:
    """Each user's allowed tool groups, and the groups of users not listed.

    Build it with :func:`parse_permissions` (or :func:`load_permissions`) from
    configuration, or directly in code::

        Permissions({"alice": ("default", "research")}, fallback=())
    """

    users: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    fallback: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Shared by every session: hand out a read-only view, with tuples inside.
        frozen = {user: tuple(groups) for user, groups in self.users.items()}
        object.__setattr__(self, "users", MappingProxyType(frozen))
        object.__setattr__(self, "fallback", tuple(self.fallback))

    @classmethod
    def unrestricted(cls) -> Permissions:
        """Access control off: every user, listed or not, may request every group."""
        return cls({}, fallback=(WILDCARD,))

    @property
    def is_unrestricted(self) -> bool:
        """True when nobody can be refused (no users listed, fallback ``["*"]``)."""
        return not self.users and WILDCARD in self.fallback

    def knows(self, user: str) -> bool:
        """Whether ``user`` is listed (as opposed to getting the fallback)."""
        return user in self.users

    def allowed(self, user: str) -> tuple[str, ...]:
        """The groups ``user`` may request: their own list, or the fallback."""
        return self.users.get(user, self.fallback)

    def check(self, user: str, requested: Sequence[str] | None) -> tuple[str, ...]:
        """The requested groups after defaulting, or :class:`AccessDenied`.

        ``None`` means ``["default"]`` and needs ``"default"`` allowed; ``[]``
        asks for nothing and is always permitted. The error for a user who is
        not listed says so, since the fix is then to list them.
        """
        try:
            return check_access(user, requested, self.allowed(user))
        except AccessDenied as exc:
            if self.knows(user):
                raise
            granted = ", ".join(map(repr, self.fallback)) or "none"
            raise AccessDenied(
                f"user {user!r} is not listed in the permissions, so gets the fallback "
                f"groups ({granted}), which do not include "
                f"{', '.join(map(repr, exc.denied))}; add the user under "
                f'"{SECTION}" -> "{USERS}", or request only fallback groups',
                user=user,
                denied=exc.denied,
            ) from None


def parse_permissions(section: Any, *, where: str = SECTION) -> Permissions:
    """Validate one ``permissions`` section (a mapping) and build :class:`Permissions`.

    ``where`` names the section in messages, e.g. ``"toolbus.toml [permissions]"``.
    Raises :class:`ConfigError` listing every problem.
    """
    problems: list[Problem] = []
    if not isinstance(section, Mapping):
        problems.append(
            Problem(
                where,
                "",
                f'must be an object like {{"{USERS}": {{"alice": ["default"]}}, '
                f'"{FALLBACK}": []}}, not {_describe(section)}',
            )
        )
        raise ConfigError(problems)

    for key in section:
        if key not in _KEYS:
            close = difflib.get_close_matches(str(key), _KEYS, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"use {USERS!r} and {FALLBACK!r}"
            problems.append(Problem(where, str(key), f"is not a permissions key; {hint}"))

    users: dict[str, tuple[str, ...]] = {}
    raw_users = section.get(USERS, {})
    if not isinstance(raw_users, Mapping):
        problems.append(
            Problem(
                where,
                USERS,
                f'must map each user to a list of groups, like {{"alice": ["default"]}}, '
                f"not {_describe(raw_users)}",
            )
        )
    else:
        for user, groups in raw_users.items():
            if not isinstance(user, str) or not user:
                problems.append(
                    Problem(
                        where, USERS, f"user names must be non-empty strings, not {_describe(user)}"
                    )
                )
                continue
            parsed = _groups(
                groups, where, f"{USERS}.{user}", f"the groups user {user!r} may request", problems
            )
            if parsed is not None:
                users[user] = parsed

    if SIGNED in section and not isinstance(section[SIGNED], str):
        problems.append(
            Problem(where, SIGNED, "must be the signed permissions document, a JWS string")
        )

    fallback: tuple[str, ...] = ()
    if FALLBACK in section:
        parsed = _groups(
            section[FALLBACK], where, FALLBACK, "the groups unlisted users may request", problems
        )
        fallback = parsed or ()

    if problems:
        raise ConfigError(problems)
    return Permissions(users, fallback=fallback)


def load_permissions(
    snapshot: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    *,
    settings_name: str = "toolbus.toml",
) -> Permissions:
    """Permissions from a snapshot's ``permissions`` section or ``toolbus.toml``'s table.

    ``settings`` is the parsed ``toolbus.toml`` (``Settings.file``). At most one
    of the two may hold permissions: two sources would leave the reader
    guessing which one applies. With neither, access control is off
    (:meth:`Permissions.unrestricted`).
    """
    found = section_in_one_place(
        SECTION, snapshot, settings, settings_name=settings_name, settings_table=f"[{SECTION}]"
    )
    if found is None:
        return Permissions.unrestricted()
    data, where = found
    return parse_permissions(data, where=where)


def _groups(
    value: Any, where: str, field_name: str, meaning: str, problems: list[Problem]
) -> tuple[str, ...] | None:
    if isinstance(value, str):
        problems.append(
            Problem(
                where, field_name, f"must be a list of group names; write [{json.dumps(value)}]"
            )
        )
        return None
    if not isinstance(value, list | tuple):
        problems.append(
            Problem(
                where,
                field_name,
                f'must be a list of group names ({meaning}), like ["default"], '
                f"not {_describe(value)}",
            )
        )
        return None
    bad = [item for item in value if not isinstance(item, str) or not item]
    if bad:
        problems.append(
            Problem(
                where,
                field_name,
                f"group names must be non-empty strings, not {_describe(bad[0])}",
            )
        )
        return None
    # Keep the order as written (for display) and drop repeats.
    return tuple(dict.fromkeys(value))


def _describe(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    if isinstance(value, str):
        return f"the string {json.dumps(value)}"
    return f"the value {value!r}"


def signed_permissions(snapshot: Mapping[str, Any] | None) -> str | None:
    """The signed permissions document a snapshot carries (``permissions.signed``), if any."""
    section = (snapshot or {}).get(SECTION)
    if not isinstance(section, Mapping):
        return None
    token = section.get(SIGNED)
    return token if isinstance(token, str) else None
