"""API keys that map a caller to a user: the credential table.

Front doors (the HTTP gateway, an MCP server over HTTP) authenticate callers
with it; what a user may then do is :mod:`toolbus.domain.access.permissions`' job.
The table is configuration that names *where* each key is, never the key::

    # toolbus.toml (or the "credentials" object of a JSON file)
    [[credentials.api-keys]]
    user = "alice"
    env = "TOOLBUS_KEY_ALICE"         # the key is this environment variable's value

    [[credentials.api-keys]]
    user = "ci-bot"
    file = "secrets/ci-bot.key"       # or this file's content (relative: to base_dir)
    label = "ci"                      # optional: names the key in logs and audit

Keys never sit in the configuration itself, so that a configuration can be
shared, committed or sent over the bus without leaking one.

How keys are kept and checked:

* the table holds only a SHA-256 digest of each key, and :class:`Secret` wraps
  a key in transit so that ``repr``, ``str`` and logging show ``'***'``;
* :meth:`CredentialTable.authenticate` compares the presented key's digest
  with *every* entry using :func:`hmac.compare_digest`, without stopping at a
  match, so neither the key nor which entry matched leaks through timing;
* a key shorter than :data:`MIN_KEY_LENGTH` characters, two users with the same
  key, a missing variable or an unreadable file are configuration errors
  (:class:`~toolbus.domain.errors.ConfigError`, every problem at once), and the
  messages name the user, the variable or the file: never the key.
"""

from __future__ import annotations

import difflib
import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from toolbus.domain.config.parsing import section_in_one_place
from toolbus.domain.errors import ConfigError, Problem

SECTION: Final = "credentials"
API_KEYS: Final = "api-keys"
#: Shorter keys are refused: they can be guessed.
MIN_KEY_LENGTH: Final = 16

_ENTRY_KEYS = ("user", "env", "file", "label")
_MASK = "***"


class Secret:
    """A secret string that does not show itself: ``repr``, ``str`` and ``format`` give ``'***'``.

    Call :meth:`reveal` where the value is really needed; that call is easy
    to find in a review.
    """

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The secret itself."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({_MASK!r})"

    def __str__(self) -> str:
        return _MASK

    def __format__(self, spec: str) -> str:
        return _MASK

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(_digest(self._value))

    def __reduce__(self) -> Any:
        # Pickling would copy the secret somewhere nobody decided it should go.
        raise TypeError("a Secret cannot be pickled; reveal() it deliberately if you must")


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a credential belongs to: the user, and which of their keys was used."""

    user: str
    #: Names the credential (e.g. ``"alice-laptop"``) in logs and audit; never the key.
    label: str


@dataclass(frozen=True, slots=True)
class ApiKey:
    """One API key of a user. Only the key's digest is kept."""

    user: str
    label: str
    digest: bytes = field(repr=False)

    @classmethod
    def of(cls, user: str, key: Secret | str, label: str | None = None) -> ApiKey:
        """The entry for ``user``'s ``key``. ``label`` defaults to the user name."""
        raw = key.reveal() if isinstance(key, Secret) else key
        return cls(user, label or user, _digest(raw))


class CredentialTable:
    """API key -> user. Build it with :func:`load_credentials` or from :class:`ApiKey` entries::

    table = CredentialTable([ApiKey.of("alice", Secret(os.environ["ALICE_KEY"]))])
    identity = table.authenticate(presented)   # Identity, or None
    """

    __slots__ = ("_entries",)

    def __init__(self, entries: Iterable[ApiKey] = ()) -> None:
        self._entries: tuple[ApiKey, ...] = tuple(entries)
        problems = _shared_keys(self._entries, "credential table")
        if problems:
            raise ConfigError(problems)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        users = sorted({entry.user for entry in self._entries})
        return f"<CredentialTable {len(self._entries)} key(s) for {users!r}>"

    @property
    def users(self) -> frozenset[str]:
        """Every user that has at least one key."""
        return frozenset(entry.user for entry in self._entries)

    def authenticate(self, presented: Secret | str | None) -> Identity | None:
        """The identity whose key is ``presented``, or None (no key, or no match).

        Every entry is compared, in constant time each, whatever matches first.
        """
        if presented is None:
            return None
        raw = presented.reveal() if isinstance(presented, Secret) else presented
        if not raw:
            return None
        digest = _digest(raw)
        found: ApiKey | None = None
        for entry in self._entries:
            if hmac.compare_digest(digest, entry.digest) and found is None:
                found = entry
        return None if found is None else Identity(found.user, found.label)


def bearer_token(authorization: str | None) -> Secret | None:
    """The token of an ``Authorization: Bearer <token>`` header value, or None.

    The scheme is case-insensitive (RFC 9110 §11.1); anything else (no header,
    another scheme, an empty token) is None.
    """
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return Secret(token)


def parse_credentials(
    section: Any,
    *,
    where: str = SECTION,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> CredentialTable:
    """Validate a ``credentials`` section, read every key it names, and build the table.

    ``environ`` defaults to :data:`os.environ`; relative ``file`` paths are
    resolved against ``base_dir`` (default: the working directory). Raises
    :class:`ConfigError` listing every problem; no message contains a key.
    """
    env = os.environ if environ is None else environ
    problems: list[Problem] = []
    if not isinstance(section, Mapping):
        problems.append(
            Problem(
                where,
                "",
                f'must be an object like {{"{API_KEYS}": [{{"user": "alice", '
                f'"env": "TOOLBUS_KEY_ALICE"}}]}}',
            )
        )
        raise ConfigError(problems)
    for key in section:
        if key != API_KEYS:
            problems.append(Problem(where, str(key), f"is not a credentials key; use {API_KEYS!r}"))
    raw_entries = section.get(API_KEYS, [])
    if not isinstance(raw_entries, list):
        problems.append(
            Problem(
                where, API_KEYS, "must be a list of objects, each with 'user' and 'env' or 'file'"
            )
        )
        raise ConfigError(problems)

    entries: list[ApiKey] = []
    for index, raw in enumerate(raw_entries):
        entry = _entry(raw, f"{where} {API_KEYS}[{index}]", env, base_dir, problems)
        if entry is not None:
            entries.append(entry)
    problems += _shared_keys(entries, where)
    if problems:
        raise ConfigError(problems)
    return CredentialTable(entries)


def load_credentials(
    snapshot: Mapping[str, Any] | None = None,
    settings: Mapping[str, Any] | None = None,
    *,
    settings_name: str = "toolbus.toml",
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
) -> CredentialTable | None:
    """The credential table from a file's ``credentials`` object or ``toolbus.toml``'s table.

    At most one of the two may hold it. None when neither does: the caller
    decides whether running without API keys is acceptable.
    """
    found = section_in_one_place(
        SECTION, snapshot, settings, settings_name=settings_name, settings_table=f"[{SECTION}]"
    )
    if found is None:
        return None
    data, where = found
    return parse_credentials(data, where=where, environ=environ, base_dir=base_dir)


def read_secret(
    *,
    env: str | None = None,
    file: str | None = None,
    where: str,
    environ: Mapping[str, str] | None = None,
    base_dir: Path | None = None,
    min_length: int = MIN_KEY_LENGTH,
) -> Secret:
    """A secret from environment variable ``env`` or from ``file`` (exactly one).

    For other secrets that configuration points at the same way (a JWT signing
    secret, say). Raises :class:`ConfigError` naming ``where`` and the variable
    or file, never the value.
    """
    problems: list[Problem] = []
    if (env is None) == (file is None):
        problems.append(
            Problem(where, "", "needs exactly one of an environment variable or a file")
        )
        raise ConfigError(problems)
    value = (
        _from_env(env, where, os.environ if environ is None else environ, problems)
        if env is not None
        else _from_file(file, where, base_dir, problems)
    )
    if value is not None and len(value) < min_length:
        source = f"variable {env!r}" if env is not None else f"file {file!r}"
        problems.append(
            Problem(
                where,
                "",
                f"the secret in {source} is {len(value)} characters; use at least {min_length}",
            )
        )
    if problems or value is None:
        raise ConfigError(problems)
    return Secret(value)


def _entry(
    raw: Any,
    where: str,
    environ: Mapping[str, str],
    base_dir: Path | None,
    problems: list[Problem],
) -> ApiKey | None:
    if not isinstance(raw, Mapping):
        problems.append(Problem(where, "", "must be an object with 'user' and 'env' or 'file'"))
        return None
    before = len(problems)
    for key in raw:
        if key not in _ENTRY_KEYS:
            if key in ("key", "secret", "value", "token"):
                hint = (
                    "keys never go in configuration; put it in an environment variable "
                    "('env') or a file ('file')"
                )
            else:
                close = difflib.get_close_matches(str(key), _ENTRY_KEYS, n=1)
                hint = f"did you mean {close[0]!r}?" if close else f"use {', '.join(_ENTRY_KEYS)}"
            problems.append(Problem(where, str(key), f"is not an API key field; {hint}"))
    user = raw.get("user")
    if not isinstance(user, str) or not user:
        problems.append(Problem(where, "user", "must be the user's name, a non-empty string"))
    else:
        # Whose key is wrong is what an operator looks for first (a name is no secret).
        where = f"{where} (user {user!r})"
    label = raw.get("label")
    if label is not None and (not isinstance(label, str) or not label):
        problems.append(Problem(where, "label", "must be a non-empty string when given"))
    has_env, has_file = "env" in raw, "file" in raw
    if has_env == has_file:
        problems.append(
            Problem(where, "", "needs exactly one of 'env' (a variable name) or 'file' (a path)")
        )
    if len(problems) > before:
        return None
    key = (
        _from_env(raw["env"], where, environ, problems)
        if has_env
        else _from_file(raw["file"], where, base_dir, problems)
    )
    if key is None:
        return None
    if len(key) < MIN_KEY_LENGTH:
        source = f"variable {raw['env']!r}" if has_env else f"file {raw['file']!r}"
        problems.append(
            Problem(
                where,
                "env" if has_env else "file",
                f"the key in {source} is {len(key)} characters; use at least {MIN_KEY_LENGTH} "
                "(e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))')",
            )
        )
        return None
    assert isinstance(user, str)  # checked above
    return ApiKey.of(user, key, label)


def _from_env(
    name: Any, where: str, environ: Mapping[str, str], problems: list[Problem]
) -> str | None:
    if not isinstance(name, str) or not name:
        problems.append(Problem(where, "env", "must name an environment variable"))
        return None
    value = environ.get(name)
    if value is None or not value.strip():
        problems.append(
            Problem(
                where,
                "env",
                f"environment variable {name!r} is not set (or empty); set it to the key",
            )
        )
        return None
    return value.strip()


def _from_file(path: Any, where: str, base_dir: Path | None, problems: list[Problem]) -> str | None:
    if not isinstance(path, str) or not path:
        problems.append(Problem(where, "file", "must be the path of a file holding the key"))
        return None
    resolved = Path(path).expanduser()
    if not resolved.is_absolute() and base_dir is not None:
        resolved = base_dir / resolved
    try:
        text = resolved.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        problems.append(Problem(where, "file", f"cannot read {str(resolved)!r}: {reason}"))
        return None
    # A trailing newline is what editors and `echo` add, not part of the key.
    key = text.strip()
    if not key:
        problems.append(Problem(where, "file", f"{str(resolved)!r} is empty; write the key in it"))
        return None
    return key


def _shared_keys(entries: Iterable[ApiKey], where: str) -> list[Problem]:
    seen: dict[bytes, ApiKey] = {}
    problems: list[Problem] = []
    for entry in entries:
        first = seen.setdefault(entry.digest, entry)
        if first is not entry and first.user != entry.user:
            problems.append(
                Problem(
                    where,
                    API_KEYS,
                    f"users {first.user!r} and {entry.user!r} have the same key; "
                    "give each user their own",
                )
            )
    return problems


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8")).digest()
