"""Planning what ``toolbus serve`` runs: the ``config`` service, plugins' services, announcing.

``toolbus serve config --store PATH`` runs the config service: the name
``config`` is resolved here, before plugin service ids and import paths. Every
other service is announced (unless ``--no-announce``) with the tools its plugin
registers by default, or the tool derived from its signature.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolbus.application.calls.service import ToolService
from toolbus.application.live.announcements import Announcer
from toolbus.application.live.config_service import (
    CONFIG_SERVICE_ID,
    ConfigPublisher,
    ConfigService,
)
from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.live.settings import STORE_ENV, read_live_settings
from toolbus.plugins import load_tool_plugins
from toolbus.runtime import merged_snapshot, resolve_service, tool_types
from toolbus.settings import SETTINGS_FILE, Settings


@dataclass(frozen=True, slots=True)
class ServePlan:
    """The services to serve, and what runs alongside them (see ``companions.alongside``):
    whether they announce, how often, and the tools (``defaults``) they announce."""

    services: list[ToolService]
    announce: bool
    interval: float
    defaults: Mapping[str, Any] = field(default_factory=dict)
    tool_types: frozenset[str] = frozenset()


def plan_services(
    names: Sequence[str],
    settings: Settings,
    *,
    store: Path | None = None,
    announce: bool | None = None,
    interval: float | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> ServePlan:
    """Resolve ``names`` (``config``, plugin service ids, import paths) and the live settings.

    Flags (``store``, ``announce``, ``interval``) win over the environment and
    ``toolbus.toml``. Raises :class:`ConfigError` or :class:`PluginError` with
    what to do.
    """
    live = read_live_settings(
        settings.file,
        base=cwd or Path.cwd(),
        environ=os.environ if environ is None else environ,
        where=SETTINGS_FILE,
    )
    plugins = load_tool_plugins()
    types = tool_types(plugins)
    if store is not None and CONFIG_SERVICE_ID not in names:
        raise ConfigError(
            [Problem("--store", "", "is the config service's store; add 'config' to the services")]
        )
    import_from_folder(cwd or Path.cwd())
    services: list[ToolService] = []
    for name in names:
        if name == CONFIG_SERVICE_ID:
            path = store or live.store
            if path is None:
                raise ConfigError(
                    [
                        Problem(
                            "the config service",
                            "",
                            f"needs a store file: give --store PATH, set {STORE_ENV}, or "
                            "set store in the [config-service] table of toolbus.toml",
                        )
                    ]
                )
            services.append(ConfigService.at(path, tool_types=types))
        else:
            services.append(resolve_service(name, plugins))
    return ServePlan(
        services,
        live.announce if announce is None else announce,
        live.announce_interval if interval is None else interval,
        merged_snapshot(plugin.snapshot for plugin in plugins),
        types,
    )


def describe(companion: Announcer | ConfigPublisher) -> str:
    """One line for the operator about something running alongside the services."""
    if isinstance(companion, ConfigPublisher):
        current = companion.service.current
        return (
            f"config store {companion.service.store.path} at version {current.version}; "
            f"changes are pushed on {companion.queue}"
        )
    tools = ", ".join(companion.announcement.tools) or "no tools"
    return f"announcing {companion.service.id} ({tools}) every {companion.interval:g} s"


def import_from_folder(folder: Path) -> None:
    """Put ``folder`` first on the import path, as uvicorn does for ``module:attr`` targets.

    A console script's ``sys.path`` starts with the script's own directory, not
    the working directory, so ``toolbus serve weather:weather`` would not find
    ``weather.py`` beside the user without this.
    """
    entry = str(folder.resolve())
    if entry not in sys.path:
        sys.path.insert(0, entry)
