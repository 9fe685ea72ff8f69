"""Caches shared by every agent session: tool lists per LLM format, a snapshot's rules.

Everything here is derived from immutable objects (registries, tools,
availabilities) and keyed by their identity, so sessions that share a snapshot
share the work, and memory stays bounded however many selections users ask for.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from toolbus.domain.access.permissions import Permissions
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Availability, Registry
from toolbus.domain.config.schemas import EXPORT_FORMATS, ExportFormat, export_tools
from toolbus.domain.hooks.configured import HookConfig

K = TypeVar("K")
V = TypeVar("V")


class IdentityCache(Generic[K, V]):
    """A small LRU cache keyed by object identity, bounded by total weight.

    Keys are held strongly while cached, so an ``id`` cannot be reused by
    another object while its entry exists. It holds what is derived from
    immutable objects (registries, tools, availabilities) and is shared by
    every session that uses them.
    """

    def __init__(self, capacity: int, weigh: Callable[[V], int] | None = None) -> None:
        self._capacity = capacity
        self._weigh = weigh
        self._weight = 0
        self._entries: OrderedDict[tuple[int, str], tuple[K, V, int]] = OrderedDict()

    def get(self, key: K, variant: str, make: Callable[[K], V]) -> V:
        slot = (id(key), variant)
        entry = self._entries.get(slot)
        if entry is not None:
            self._entries.move_to_end(slot)
            return entry[1]
        value = make(key)
        weight = 1 if self._weigh is None else self._weigh(value)
        self._entries[slot] = (key, value, weight)
        self._weight += weight
        while self._weight > self._capacity and len(self._entries) > 1:
            _, (_, _, dropped) = self._entries.popitem(last=False)
            self._weight -= dropped
        return value


# Exporting a tool builds several dicts; with thousands of tools that is far too
# slow for every LLM turn. Each tool is exported once per format, and each
# selection's list is built once from those shared dicts, so a cached list
# costs a pointer per tool however many selections include the tool.
_TOOL_ENTRIES: IdentityCache[ToolDescriptor, dict[str, Any]] = IdentityCache(60_000)
_TOOL_LISTS: IdentityCache[Availability, list[dict[str, Any]]] = IdentityCache(
    2_000_000, weigh=lambda entries: len(entries) + 1
)
# Parsing the snapshot's permissions once per snapshot, not once per session.
SNAPSHOT_PERMISSIONS: IdentityCache[Registry, Permissions] = IdentityCache(8)
# The same for the snapshot's hooks.
SNAPSHOT_HOOKS: IdentityCache[Registry, tuple[HookConfig, ...]] = IdentityCache(8)


def tool_list(availability: Availability, format: ExportFormat) -> list[dict[str, Any]]:
    if format not in EXPORT_FORMATS:  # checked here too: an empty selection exports nothing
        raise ValueError(
            f"unknown tool-list format {format!r}; use one of {', '.join(EXPORT_FORMATS)}"
        )

    def export(tool: ToolDescriptor) -> dict[str, Any]:
        return export_tools((tool,), format)[0]

    def build(selection: Availability) -> list[dict[str, Any]]:
        return [_TOOL_ENTRIES.get(tool, format, export) for tool in selection.available]

    return _TOOL_LISTS.get(availability, format, build)
