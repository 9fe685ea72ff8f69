"""What is installed: the entry-point groups, and the distributions that fill them.

Reading these is reading package metadata only: no plugin is imported, so
``toolbus --version`` and ``toolbus plugins`` answer without loading any.
"""

from __future__ import annotations

import importlib.metadata as metadata
from collections.abc import Sequence
from dataclasses import dataclass

ADAPTER_GROUP = "toolbus.adapters"
PLUGIN_GROUP = "toolbus.plugins"
COMMAND_GROUP = "toolbus.commands"
LLM_GROUP = "toolbus.llms"
STATE_GROUP = "toolbus.state_stores"
POLICY_GROUP = "toolbus.policy_engines"


def entry_points(group: str) -> Sequence[metadata.EntryPoint]:
    """The entry points of ``group`` (the one place plugins are looked up, so tests can
    stand in for it)."""
    return tuple(metadata.entry_points(group=group))


def distribution_of(ep: metadata.EntryPoint) -> tuple[str, str]:
    """The name and version of the distribution that declares ``ep``."""
    dist = ep.dist
    if dist is None:
        return ("?", "?")
    return (dist.metadata["Name"], dist.version)


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    kind: str  # "adapter", "llm", "state", "policy", "tools" or "commands"
    name: str
    distribution: str
    version: str


def installed_plugins() -> list[InstalledPlugin]:
    """Every installed adapter and tool plugin with its distribution and version (no imports)."""
    found = []
    groups = (
        ("adapter", ADAPTER_GROUP),
        ("llm", LLM_GROUP),
        ("state", STATE_GROUP),
        ("policy", POLICY_GROUP),
        ("tools", PLUGIN_GROUP),
        ("commands", COMMAND_GROUP),
    )
    for kind, group in groups:
        for ep in entry_points(group):
            distribution, version = distribution_of(ep)
            found.append(InstalledPlugin(kind, ep.name, distribution, version))
    return sorted(found, key=lambda p: (p.kind, p.name))
