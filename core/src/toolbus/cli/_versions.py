"""``toolbus --version``'s lines: the core's version, then each plugin distribution's."""

from __future__ import annotations

import importlib.metadata as metadata

from toolbus.plugins.installed import installed_plugins


def version_lines() -> list[str]:
    """``toolbus X``, then every other distribution that installs plugins, by name."""
    lines = [f"toolbus {metadata.version('toolbus')}"]
    distributions = {(p.distribution, p.version) for p in installed_plugins()}
    lines += [f"{name} {version}" for name, version in sorted(distributions) if name != "toolbus"]
    return lines
