"""Settings of live configuration: the config service's store, announcing, following.

Read from ``toolbus.toml`` and the environment; command-line flags override
both (the CLI passes them in). Precedence, highest first: flag, environment
variable, ``toolbus.toml``, default.

.. code-block:: toml

    [config-service]
    store = "config-store.json"   # toolbus serve config: the store file (relative to this file)
    follow = true                 # agents follow the config service

    [announcements]
    enabled = true                # toolbus serve: services announce themselves
    interval = 10                 # seconds between announcements (agents wait 3 before expiry)
    accept = true                 # agents merge announced tools

Environment: ``TOOLBUS_CONFIG_STORE`` (the store file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toolbus.domain.errors import ConfigError, Problem

STORE_ENV = "TOOLBUS_CONFIG_STORE"
CONFIG_SERVICE_TABLE = "config-service"
ANNOUNCEMENTS_TABLE = "announcements"
DEFAULT_ANNOUNCE_INTERVAL = 10.0


@dataclass(frozen=True, slots=True)
class LiveSettings:
    """Where the config service keeps its store, and how announcing and following behave."""

    store: Path | None = None
    follow_config: bool = True
    announce: bool = True
    announce_interval: float = DEFAULT_ANNOUNCE_INTERVAL
    accept_announcements: bool = True


def read_live_settings(
    file: Mapping[str, Any],
    *,
    base: Path,
    environ: Mapping[str, str],
    where: str = "toolbus.toml",
) -> LiveSettings:
    """Live settings from a parsed ``toolbus.toml`` (``Settings.file``) and the environment.

    ``base`` is the directory of ``toolbus.toml``: a relative ``store`` is
    relative to it. Raises :class:`ConfigError` naming every wrong key.
    """
    problems: list[Problem] = []
    service = _table(file, CONFIG_SERVICE_TABLE, {"store", "follow"}, where, problems)
    heard = _table(file, ANNOUNCEMENTS_TABLE, {"enabled", "interval", "accept"}, where, problems)

    store: Path | None = None
    if environ.get(STORE_ENV):
        store = Path(environ[STORE_ENV])
    elif "store" in service:
        if isinstance(service["store"], str) and service["store"]:
            store = base / service["store"]
        else:
            problems.append(Problem(f"{where} [{CONFIG_SERVICE_TABLE}]", "store", "must be a path"))
    follow = _flag(service, "follow", True, f"{where} [{CONFIG_SERVICE_TABLE}]", problems)
    announce = _flag(heard, "enabled", True, f"{where} [{ANNOUNCEMENTS_TABLE}]", problems)
    accept = _flag(heard, "accept", True, f"{where} [{ANNOUNCEMENTS_TABLE}]", problems)
    interval = heard.get("interval", DEFAULT_ANNOUNCE_INTERVAL)
    if (
        not isinstance(interval, int | float)
        or isinstance(interval, bool)
        or not math.isfinite(interval)
        or interval <= 0
    ):
        problems.append(
            Problem(f"{where} [{ANNOUNCEMENTS_TABLE}]", "interval", "must be a positive number")
        )
        interval = DEFAULT_ANNOUNCE_INTERVAL
    if problems:
        raise ConfigError(problems)
    return LiveSettings(store, follow, announce, float(interval), accept)


def _table(
    file: Mapping[str, Any], name: str, keys: set[str], where: str, problems: list[Problem]
) -> Mapping[str, Any]:
    table = file.get(name, {})
    if not isinstance(table, Mapping):
        problems.append(Problem(where, name, "must be a table"))
        return {}
    for key in table:
        if key not in keys:
            problems.append(
                Problem(f"{where} [{name}]", str(key), f"is unknown; use {', '.join(sorted(keys))}")
            )
    return table


def _flag(
    table: Mapping[str, Any], key: str, default: bool, where: str, problems: list[Problem]
) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        problems.append(Problem(where, key, "must be true or false"))
        return default
    return value
