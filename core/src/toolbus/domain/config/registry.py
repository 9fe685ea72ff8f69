"""The registry: one validated configuration snapshot, and which tools it offers when.

Filtering follows TrustGraph's code semantics (docs/groups-and-states.md). For requested
``groups`` and a ``state``, a tool is available iff

* ``"*"`` is among the requested groups, or the tool shares a group with them; and
* the tool has no ``applicable-states``, or they contain ``"*"`` or the state.

Requested groups ``None`` mean ``["default"]``; an explicit empty list offers
no tools at all. A state of ``None`` or ``""`` means ``"undefined"``. Results
are cached per (groups, state) for the life of the registry, which never
changes: a new snapshot is a new registry with a fresh cache.

Build registries with :func:`toolbus.domain.config.loading.load_registry`, which
validates first.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from toolbus.domain.config.descriptors import DEFAULT_GROUP
from toolbus.domain.errors import ToolbusError, UnknownTool

if TYPE_CHECKING:
    from toolbus.domain.config.descriptors import ServiceDescriptor, ToolDescriptor


UNDEFINED_STATE = "undefined"
WILDCARD = "*"
# Requested groups come from users, so the number of distinct (groups, state)
# keys is theirs to choose; bounding the cache keeps memory ours to choose.
MAX_CACHED_SELECTIONS = 512


class ServiceNotConfigured(ToolbusError, LookupError):
    """A tool has no tool service in this registry."""


@dataclass(frozen=True, slots=True)
class Availability:
    """The tools offered for one (groups, state), and the names of those that are not.

    ``filtered_by_group`` holds the tools sharing no group with the request;
    ``filtered_by_state`` those that pass the group check but are not offered in
    the state. The three are disjoint and together are every tool, in
    configuration order.
    """

    available: tuple[ToolDescriptor, ...]
    filtered_by_group: tuple[str, ...]
    filtered_by_state: tuple[str, ...]


def normalize_groups(groups: Sequence[str] | None) -> tuple[str, ...]:
    """Requested groups as a tuple: ``None`` → ``("default",)``, ``[]`` → ``()``.

    Raises ``TypeError`` for a bare string, which would otherwise be read as a
    list of one-letter groups.
    """
    if groups is None:
        return (DEFAULT_GROUP,)
    if isinstance(groups, str):
        raise TypeError(f"groups must be a list of group names, not the string {groups!r}")
    result = tuple(groups)
    for group in result:
        if not isinstance(group, str):
            raise TypeError(f"group names must be strings, not {type(group).__name__}")
    return result


def normalize_state(state: str | None) -> str:
    """The request state, with ``None`` and ``""`` meaning ``"undefined"``."""
    return state or UNDEFINED_STATE


class _Entry:
    """A tool with its groups and states as sets, so filtering is set look-ups."""

    __slots__ = ("groups", "states", "tool")

    def __init__(self, tool: ToolDescriptor) -> None:
        self.tool = tool
        self.groups = frozenset(tool.groups)
        states = tool.applicable_states
        # None means "every state"; so does a list holding the wildcard.
        self.states = None if states is None or WILDCARD in states else frozenset(states)

    def in_groups(self, requested: Collection[str]) -> bool:
        return WILDCARD in requested or not self.groups.isdisjoint(requested)

    def in_state(self, state: str) -> bool:
        return self.states is None or state in self.states


class Registry:
    """An immutable, validated snapshot of services and tools, with cached filtering."""

    __slots__ = ("_by_llm_name", "_by_name", "_cache", "_entries", "_services", "_snapshot")

    def __init__(
        self,
        services: Mapping[str, ServiceDescriptor],
        tools: Iterable[ToolDescriptor],
        snapshot: Mapping[str, Any] | None = None,
    ) -> None:
        self._services: Mapping[str, ServiceDescriptor] = MappingProxyType(dict(services))
        self._snapshot: Mapping[str, Any] = MappingProxyType(dict(snapshot or {}))
        by_name: dict[str, ToolDescriptor] = {}
        by_llm_name: dict[str, ToolDescriptor] = {}
        entries: dict[str, _Entry] = {}
        for tool in tools:
            if tool.name in by_name or tool.llm_name in by_llm_name:
                raise ValueError(
                    f"tool name {tool.name!r} (LLM name {tool.llm_name!r}) is used twice; "
                    "build registries with load_registry(), which reports such problems"
                )
            by_name[tool.name] = tool
            by_llm_name[tool.llm_name] = tool
            entries[tool.name] = _Entry(tool)
        self._by_name: Mapping[str, ToolDescriptor] = MappingProxyType(by_name)
        self._by_llm_name = by_llm_name
        self._entries = entries
        self._cache: dict[tuple[tuple[str, ...], str], Availability] = {}

    def __repr__(self) -> str:
        return f"<Registry: {len(self._services)} tool services, {len(self._by_name)} tools>"

    @property
    def services(self) -> Mapping[str, ServiceDescriptor]:
        """Tool services by id (read-only)."""
        return self._services

    @property
    def tools(self) -> Mapping[str, ToolDescriptor]:
        """Tools by configured name, in configuration order (read-only)."""
        return self._by_name

    @property
    def snapshot(self) -> Mapping[str, Any]:
        """The snapshot this registry was built from, other sections included (read-only)."""
        return self._snapshot

    def tool(self, name: str) -> ToolDescriptor:
        """The tool called ``name``, as configured or as the LLM sees it.

        Raises :class:`UnknownTool` suggesting close names.
        """
        found = self._by_name.get(name) or self._by_llm_name.get(name)
        if found is not None:
            return found
        names = list(self._by_name) + [n for n in self._by_llm_name if n not in self._by_name]
        close = difflib.get_close_matches(name, names, n=3)
        if close:
            hint = f"did you mean {' or '.join(map(repr, close))}?"
        elif names:
            shown = ", ".join(map(repr, list(self._by_name)[:10]))
            hint = f"configured tools: {shown}{', ...' if len(self._by_name) > 10 else ''}"
        else:
            hint = "no tools are configured"
        raise UnknownTool(f"no tool named {name!r}; {hint}")

    def service_for(self, tool: ToolDescriptor) -> ServiceDescriptor:
        """The tool service a tool calls; :class:`ServiceNotConfigured` if it has none here."""
        if tool.service is None:
            raise ServiceNotConfigured(
                f"tool {tool.name!r} (type {tool.type!r}) is not backed by a tool service"
            )
        service = self._services.get(tool.service)
        if service is None:
            raise ServiceNotConfigured(
                f"tool {tool.name!r} names tool-service {tool.service!r}, which this "
                "configuration does not have"
            )
        return service

    def availability(self, groups: Sequence[str] | None, state: str | None) -> Availability:
        """What is offered for ``groups`` in ``state``, and what is filtered out and why."""
        key = (normalize_groups(groups), normalize_state(state))
        found = self._cache.get(key)
        if found is None:
            found = self._filter(*key)
            if len(self._cache) >= MAX_CACHED_SELECTIONS:
                # Drop the oldest entry; pop with a default so that a concurrent
                # eviction of the same key is harmless.
                self._cache.pop(next(iter(self._cache)), None)
            self._cache[key] = found
        return found

    def available(
        self, groups: Sequence[str] | None, state: str | None
    ) -> tuple[ToolDescriptor, ...]:
        """The tools offered for ``groups`` in ``state``, in configuration order."""
        return self.availability(groups, state).available

    def is_available(self, name: str, groups: Sequence[str] | None, state: str | None) -> bool:
        """Whether tool ``name`` (configured or LLM name) is offered; ``False`` if unknown."""
        tool = self._by_name.get(name) or self._by_llm_name.get(name)
        if tool is None:
            return False
        entry = self._entries[tool.name]
        return entry.in_groups(normalize_groups(groups)) and entry.in_state(normalize_state(state))

    def next_state(self, tool: ToolDescriptor | str, current: str) -> str:
        """The state after a *successful* call of ``tool``: its ``state`` if set, else ``current``.

        A failed call never changes the state; callers simply do not ask.
        """
        descriptor = self.tool(tool) if isinstance(tool, str) else tool
        return descriptor.state or current

    def groups(self) -> dict[str, tuple[ToolDescriptor, ...]]:
        """Every group named by some tool, sorted, with its tools in configuration order.

        Tools with ``group: []`` belong to no group and appear nowhere here.
        """
        members: dict[str, list[ToolDescriptor]] = {}
        for entry in self._entries.values():
            for group in entry.tool.groups:
                members.setdefault(group, [])
                if not members[group] or members[group][-1] is not entry.tool:
                    members[group].append(entry.tool)
        return {group: tuple(members[group]) for group in sorted(members)}

    def _filter(self, groups: tuple[str, ...], state: str) -> Availability:
        available: list[ToolDescriptor] = []
        by_group: list[str] = []
        by_state: list[str] = []
        requested = frozenset(groups)
        everything = WILDCARD in requested
        for name, entry in self._entries.items():
            if not everything and entry.groups.isdisjoint(requested):
                by_group.append(name)
            elif entry.in_state(state):
                available.append(entry.tool)
            else:
                by_state.append(name)
        return Availability(tuple(available), tuple(by_group), tuple(by_state))
