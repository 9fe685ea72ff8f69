"""Where an agent's configuration comes from, and which source wins.

An agent's registry is built from layers, highest precedence first:

1. the **config service**'s snapshot (live, versioned);
2. the **local** configuration: a file or directory (``--config``,
   ``TOOLBUS_CONFIG``, ``toolbus.toml``), or the installed plugins' defaults
   when none is given;
3. **announcements** of running tool services.

Layers 1 and 2 are *configured*: :func:`overlay` merges them entry by entry
(``TYPE/KEY``), the higher layer replacing an entry of the lower one whole.
The result must be valid on its own (:func:`compose` raises ``ConfigError``
otherwise, and the caller keeps the registry it has).

Announced entries are then added where they do not clash. Configured entries
always win: an announced service or tool whose key is configured, or an
announced tool whose name (or LLM name) a configured tool already has, is left
out and reported as a :class:`Clash` (unless it is identical to the configured
one, which is no clash at all). Between two announcing services, the one with
the smaller service id wins. An announcement that is invalid, or that would
make the configuration invalid, is left out whole and reported in
:attr:`Composition.rejected`; it never takes the others down with it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES, SERVICES, TOOLS
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError
from toolbus.domain.live.announcements import Announcement
from toolbus.domain.live.items import decoded, same_value

CONFIGURATION = "the configuration"


def overlay(*layers: Mapping[str, Any]) -> dict[str, Any]:
    """Merge snapshots entry by entry, lowest precedence first: later layers win.

    Sections are merged key by key; a section that is not an object in a later
    layer replaces the earlier one whole.
    """
    merged: dict[str, Any] = {}
    for layer in layers:
        for name, section in layer.items():
            current = merged.get(name)
            if isinstance(section, Mapping) and isinstance(current, dict):
                current.update(section)
            elif isinstance(section, Mapping):
                merged[name] = dict(section)
            else:
                merged[name] = section
    return merged


@dataclass(frozen=True, slots=True)
class Clash:
    """An announced entry left out because another source has its key or name."""

    service: str  # the announcing service
    entry: str  # e.g. "tool 'tell-joke'" or "tool-service 'joke-service'"
    winner: str  # CONFIGURATION, or "tool service 'x'" for an earlier announcement
    reason: str  # e.g. "the same key" or "the name 'tell joke'"

    def __str__(self) -> str:
        return (
            f"{self.entry} announced by tool service {self.service!r} is ignored: "
            f"{self.winner} already has {self.reason}"
        )


@dataclass(frozen=True, slots=True)
class Composition:
    """An agent's registry and how it came about."""

    registry: Registry
    #: Services whose announcements (or part of them) are in the registry.
    announced: tuple[str, ...] = ()
    clashes: tuple[Clash, ...] = ()
    #: Announcing services left out entirely, and why.
    rejected: Mapping[str, ConfigError] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rejected", MappingProxyType(dict(self.rejected)))


class _Names:
    """Who holds each tool key, tool name and LLM name so far."""

    def __init__(self, configured: Mapping[str, Any]) -> None:
        self.keys: dict[str, str] = {}
        self.names: dict[str, str] = {}
        section = configured.get(TOOLS)
        for key, value in section.items() if isinstance(section, Mapping) else ():
            self.keys[key] = CONFIGURATION
            tool = decoded(value)
            if isinstance(tool, Mapping) and isinstance(tool.get("name"), str):
                self.names.setdefault(tool["name"], CONFIGURATION)
                self.names.setdefault(sanitize_toolname(tool["name"]), CONFIGURATION)

    def holder(self, key: str, name: Any) -> tuple[str, str] | None:
        if key in self.keys:
            return self.keys[key], "the same key"
        if isinstance(name, str):
            for candidate in (name, sanitize_toolname(name)):
                if candidate in self.names:
                    return self.names[candidate], f"a tool named {candidate!r}"
        return None

    def take(self, key: str, name: Any, owner: str) -> None:
        self.keys[key] = owner
        if isinstance(name, str):
            self.names.setdefault(name, owner)
            self.names.setdefault(sanitize_toolname(name), owner)


def _part(
    announcement: Announcement,
    configured: Mapping[str, Any],
    names: _Names,
    clashes: list[Clash],
) -> dict[str, dict[str, Any]]:
    """What of ``announcement`` may join, given what is configured and taken."""
    part: dict[str, dict[str, Any]] = {SERVICES: {}, TOOLS: {}}
    service = announcement.service
    services = configured.get(SERVICES)
    configured_service = services.get(service) if isinstance(services, Mapping) else None
    if configured_service is None:
        part[SERVICES][service] = dict(announcement.descriptor)
    elif not same_value(configured_service, dict(announcement.descriptor)):
        clashes.append(Clash(service, f"tool-service {service!r}", CONFIGURATION, "the same key"))
    configured_tools = configured.get(TOOLS)
    configured_tools = configured_tools if isinstance(configured_tools, Mapping) else {}
    owner = f"tool service {service!r}"
    for key, tool in announcement.tools.items():
        name = tool.get("name")
        if key in configured_tools and same_value(configured_tools[key], dict(tool)):
            continue  # announced exactly as configured: nothing to report
        holder = names.holder(key, name)
        if holder is not None:
            winner, reason = holder
            entry = f"tool {key!r}" + (f" (name {name!r})" if isinstance(name, str) else "")
            clashes.append(Clash(service, entry, winner, reason))
            continue
        names.take(key, name, owner)
        part[TOOLS][key] = dict(tool)
    return part


def compose(
    configured: Mapping[str, Any],
    announcements: Iterable[Announcement] = (),
    *,
    tool_types: Iterable[str] = BUILTIN_TOOL_TYPES,
) -> Composition:
    """The registry of ``configured`` plus what ``announcements`` may add.

    Raises :class:`ConfigError` when ``configured`` itself is invalid.
    Announcements never make this fail: those that cannot join are reported.
    """
    types = frozenset(tool_types)
    registry = load_registry(configured, tool_types=types)
    ordered = sorted(announcements, key=lambda a: a.service)
    if not ordered:
        return Composition(registry)

    rejected: dict[str, ConfigError] = {}
    valid: list[Announcement] = []
    for announcement in ordered:
        try:
            load_registry(announcement.snapshot(), tool_types=types)
        except ConfigError as exc:
            rejected[announcement.service] = exc
        else:
            valid.append(announcement)

    # Usually every announcement fits: check them all in one validation.
    clashes: list[Clash] = []
    names = _Names(configured)
    parts = [(a, _part(a, configured, names, clashes)) for a in valid]
    merged = overlay(configured, *(part for _, part in parts))
    try:
        registry = load_registry(merged, tool_types=types)
    except ConfigError:
        pass
    else:
        return Composition(registry, tuple(a.service for a in valid), tuple(clashes), rejected)

    # Some announcement does not fit with the configuration: add them one at a
    # time, so that only the misfits are left out.
    clashes = []
    names = _Names(configured)
    merged = overlay(configured)
    joined: list[str] = []
    for announcement in valid:
        trial_names = _Names({})
        trial_names.keys, trial_names.names = dict(names.keys), dict(names.names)
        trial_clashes: list[Clash] = []
        part = _part(announcement, configured, trial_names, trial_clashes)
        trial = overlay(merged, part)
        try:
            registry = load_registry(trial, tool_types=types)
        except ConfigError as exc:
            rejected[announcement.service] = exc
            continue
        merged, names = trial, trial_names
        clashes += trial_clashes
        joined.append(announcement.service)
    return Composition(registry, tuple(joined), tuple(clashes), rejected)
