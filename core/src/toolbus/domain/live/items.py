"""Configuration items and versions: what the config service stores, changes and pushes.

The config service keeps one snapshot (docs/configuration.md) as *items*, each named
``TYPE/KEY`` like TrustGraph's ``tg-put-config-item tool/tell-joke``: ``TYPE``
is the snapshot section (``tool``, ``tool-service``, ``permissions``, ...) and
``KEY`` the entry in it. A change is a list of puts and deletes applied to the
whole snapshot at once; the result is validated *as a whole* before anything
is stored (:func:`validate_snapshot`), so a change that would leave the
configuration invalid is refused and the live one stays.

Every accepted change gets the next version number. A :class:`ConfigVersion`
(the store's identity, its version and the full snapshot) is what the store
file holds and what the config service pushes to agents; carrying the full
snapshot lets an agent that missed a push catch up from the next one.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolbus.domain.access.permissions import SECTION as PERMISSIONS_SECTION
from toolbus.domain.access.permissions import parse_permissions
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES, SERVICES, TOOLS
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.parsing import parse_json
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem, ToolCallError

#: The wire error type of a refused change; its message is the ConfigError text.
CONFIG_REJECTED = "config-rejected"
#: What the store file says it is, so that a wrong file is recognised as such.
STORE_FORMAT = "toolbus-config-store/1"
SNAPSHOT_FORMAT = "toolbus-config/1"


class ConfigRejected(ToolCallError):
    """The config service refused a change: the snapshot it would make is invalid.

    The message is the :class:`ConfigError` text, listing every problem.
    """

    error_type = CONFIG_REJECTED


class ItemMissing(LookupError):
    """A ``TYPE/KEY`` named by a get or a delete is not in the configuration."""


# --------------------------------------------------------------------------- items


@dataclass(frozen=True, slots=True, order=True)
class ItemName:
    """``TYPE/KEY``: a snapshot section and an entry in it."""

    type: str
    key: str

    def __str__(self) -> str:
        return f"{self.type}/{self.key}"


def _check_part(value: str, what: str, text: str) -> None:
    if not value:
        raise ValueError(f"{text!r} has an empty {what}; write TYPE/KEY, e.g. tool/tell-joke")
    if value != value.strip() or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise ValueError(f"{text!r}: the {what} has surrounding spaces or control characters")


def parse_type(text: str) -> str:
    """A section name as given to ``list TYPE``; raises ``ValueError`` with the fix."""
    _check_part(text, "TYPE", text)
    if "/" in text:
        raise ValueError(f"{text!r} is not a TYPE: it contains '/'; e.g. 'tool' or 'tool-service'")
    return text


def parse_item(text: str) -> ItemName:
    """``"tool/tell-joke"`` → ``ItemName("tool", "tell-joke")``.

    The type ends at the first ``/``; the key is the rest and may contain ``/``.
    Raises ``ValueError`` saying what is wrong.
    """
    type_, sep, key = text.partition("/")
    if not sep:
        raise ValueError(f"{text!r} is not TYPE/KEY; e.g. tool/tell-joke or tool-service/joke")
    _check_part(type_, "TYPE", text)
    _check_part(key, "KEY", text)
    return ItemName(type_, key)


@dataclass(frozen=True, slots=True)
class Put:
    """Set ``name`` to ``value`` (any JSON value; descriptors are objects or JSON strings)."""

    name: ItemName
    value: Any

    @property
    def operation(self) -> str:
        return "put"


@dataclass(frozen=True, slots=True)
class Delete:
    """Remove ``name``; deleting what is not there is an error (:class:`ItemMissing`)."""

    name: ItemName

    @property
    def operation(self) -> str:
        return "delete"


Change = Put | Delete


def apply_changes(
    snapshot: Mapping[str, Any], changes: Iterable[Change], *, replace: bool = False
) -> dict[str, dict[str, Any]]:
    """The snapshot after ``changes``, as a new dict; ``snapshot`` is not touched.

    With ``replace`` the changes start from an empty snapshot (deletes are then
    meaningless and refused). A put of an existing key keeps its position, so
    tool order (which is the order the LLM is offered tools in) is stable; a new
    key goes last. A section left empty is dropped. Raises :class:`ItemMissing`
    for a delete of an absent item.
    """
    result: dict[str, dict[str, Any]] = (
        {} if replace else {name: dict(section) for name, section in _sections(snapshot)}
    )
    for change in changes:
        section = result.setdefault(change.name.type, {})
        if isinstance(change, Put):
            section[change.name.key] = change.value
        else:
            if change.name.key not in section:
                raise ItemMissing(f"{change.name} is not in the configuration; nothing to delete")
            del section[change.name.key]
        if not section:
            del result[change.name.type]
    return result


def _sections(snapshot: Mapping[str, Any]) -> Iterable[tuple[str, Mapping[str, Any]]]:
    for name, section in snapshot.items():
        if isinstance(section, Mapping):
            yield name, section


def items_of(snapshot: Mapping[str, Any], type_: str | None = None) -> list[ItemName]:
    """Every item of the snapshot (or of one section), in snapshot order."""
    return [
        ItemName(name, key)
        for name, section in _sections(snapshot)
        if type_ is None or name == type_
        for key in section
    ]


def get_item(snapshot: Mapping[str, Any], name: ItemName) -> Any:
    """The value of ``name``; raises :class:`ItemMissing` suggesting what exists."""
    section = snapshot.get(name.type)
    if isinstance(section, Mapping) and name.key in section:
        return section[name.key]
    if isinstance(section, Mapping) and section:
        keys = ", ".join(sorted(map(str, section))[:10])
        hint = f"{name.type} has: {keys}{', ...' if len(section) > 10 else ''}"
    else:
        types = ", ".join(name for name, _ in _sections(snapshot)) or "none"
        hint = f"there is no {name.type!r} item at all (types present: {types})"
    raise ItemMissing(f"{name} is not in the configuration; {hint}")


#: The section configured hooks read (``toolbus.domain.hooks``, which the live
#: concern does not import: hooks sit beside it, not below).
HOOKS_SECTION = "hooks"
#: The sections a live snapshot may hold; anything else is a typo (``tools``)
#: that would otherwise be stored, versioned and pushed, and do nothing.
SNAPSHOT_SECTIONS = (SERVICES, TOOLS, PERMISSIONS_SECTION, HOOKS_SECTION)


def unknown_section(name: str) -> Problem:
    """The problem of a snapshot section no part of toolbus reads."""
    close = difflib.get_close_matches(name, SNAPSHOT_SECTIONS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return Problem(
        f"snapshot section {name!r}",
        "",
        f"is not a section toolbus reads; {hint}the sections are {', '.join(SNAPSHOT_SECTIONS)}",
    )


def validate_snapshot(
    snapshot: Mapping[str, Any], *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
) -> Registry:
    """Check a whole snapshot: tools and services, and ``permissions`` when present.

    Returns the registry it makes; raises one :class:`ConfigError` listing every
    problem of every section.
    """
    problems: list[Problem] = [
        unknown_section(name) for name in snapshot if name not in SNAPSHOT_SECTIONS
    ]
    registry: Registry | None = None
    try:
        registry = load_registry(snapshot, tool_types=tool_types)
    except ConfigError as exc:
        problems += exc.problems
    if PERMISSIONS_SECTION in snapshot:
        try:
            parse_permissions(
                snapshot[PERMISSIONS_SECTION], where=f"snapshot section {PERMISSIONS_SECTION!r}"
            )
        except ConfigError as exc:
            problems += exc.problems
    if problems or registry is None:
        raise ConfigError(problems)
    return registry


def same_value(left: Any, right: Any) -> bool:
    """Whether two item values mean the same (a descriptor as object or as JSON string)."""
    return bool(decoded(left) == decoded(right))


def decoded(value: Any) -> Any:
    """An item value as data: a descriptor may be stored as an object or as JSON text."""
    if isinstance(value, str):
        try:
            return parse_json(value)
        except ValueError:
            return value
    return value


# --------------------------------------------------------------------------- versions


@dataclass(frozen=True, slots=True)
class ConfigVersion:
    """One version of a store's snapshot.

    ``store`` identifies the store (a random id made when it was created), so
    that an agent can tell "version 3 of a new store" from "an old version 3".
    """

    store: str
    version: int
    snapshot: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        if not isinstance(self.snapshot, MappingProxyType):
            object.__setattr__(self, "snapshot", MappingProxyType(dict(self.snapshot)))

    def supersedes(self, other: ConfigVersion | None) -> bool:
        """Whether an agent holding ``other`` should switch to this version.

        A different store always wins (the config service was given a new store);
        within one store only a higher version does, so that a late or repeated
        push never takes an agent back.
        """
        return other is None or self.store != other.store or self.version > other.version


def _plain(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    return {name: dict(section) if isinstance(section, Mapping) else section
            for name, section in snapshot.items()}  # fmt: skip


def encode_version(version: ConfigVersion, *, format: str = SNAPSHOT_FORMAT) -> bytes:
    """A version as JSON: ``{"format", "store", "version", "snapshot"}``."""
    document = {
        "format": format,
        "store": version.store,
        "version": version.version,
        "snapshot": _plain(version.snapshot),
    }
    return json.dumps(document, ensure_ascii=False, indent=1).encode("utf-8")


def decode_version(
    data: bytes | str, *, where: str = "config message", format: str = SNAPSHOT_FORMAT
) -> ConfigVersion:
    """Read what :func:`encode_version` wrote; raises :class:`ConfigError` naming ``where``."""
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        document = parse_json(text)
    except UnicodeDecodeError as exc:
        raise ConfigError([Problem(where, "", f"is not UTF-8 text ({exc.reason})")]) from None
    except ValueError as exc:
        raise ConfigError([Problem(where, "", str(exc))]) from None
    problems: list[Problem] = []
    if not isinstance(document, dict):
        raise ConfigError([Problem(where, "", f"must be a JSON object holding a {format}")])
    if document.get("format") != format:
        problems.append(
            Problem(where, "format", f"is {document.get('format')!r}, expected {format!r}")
        )
    store, number, snapshot = (
        document.get("store"),
        document.get("version"),
        document.get("snapshot"),
    )
    if not isinstance(store, str) or not store:
        problems.append(Problem(where, "store", "must be a non-empty string"))
    if not isinstance(number, int) or isinstance(number, bool) or number < 0:
        problems.append(Problem(where, "version", "must be a whole number, 0 or more"))
    if not isinstance(snapshot, dict) or not all(
        isinstance(section, dict) for section in snapshot.values()
    ):
        problems.append(
            Problem(where, "snapshot", "must be an object of sections, each an object of items")
        )
    if problems or not isinstance(store, str) or not isinstance(number, int):
        raise ConfigError(problems)
    assert isinstance(snapshot, dict)
    return ConfigVersion(store, number, snapshot)


def describe_changes(changes: Sequence[Change]) -> str:
    """``put tool/a, delete tool/b`` (at most five named), for logs and answers."""
    shown = ", ".join(f"{c.operation} {c.name}" for c in changes[:5])
    more = len(changes) - 5
    return shown + (f" and {more} more" if more > 0 else "")
