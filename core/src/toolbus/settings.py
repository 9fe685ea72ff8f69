"""Where the broker URL, the state store URL and the configuration come from.

Precedence, highest first: command-line flags, environment variables
(``TOOLBUS_BROKER``, ``TOOLBUS_STATE``, ``TOOLBUS_SEAL_KEYS``, ``TOOLBUS_CONFIG``),
then ``toolbus.toml`` in the current directory (keys ``broker``, ``state``,
``seal-keys``, ``config`` and the ``[broker-options]`` and ``[state-options]``
tables). The default broker is ``memory://``; no state store is configured
unless one is named. A ``config`` path in ``toolbus.toml`` is relative to that
file, and so are seal key files.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolbus.domain.errors import ConfigError, Problem

SETTINGS_FILE = "toolbus.toml"
DEFAULT_BROKER = "memory://"


@dataclass(frozen=True, slots=True)
class Settings:
    broker: str = DEFAULT_BROKER
    #: Whether the broker was named (flag, environment or ``toolbus.toml``), not defaulted.
    broker_named: bool = False
    config: Path | None = None
    broker_options: Mapping[str, Any] = field(default_factory=dict)
    #: The state store's URL (``memory://``, ``nats://...``, ``redis://...``), if any.
    state: str | None = None
    state_options: Mapping[str, Any] = field(default_factory=dict)
    #: Where the keys that seal door state are (``env:NAME`` or files), the sealing one
    #: first; empty when none are named.
    seal_keys: tuple[str, ...] = ()
    #: The whole ``toolbus.toml``, for features that read their own tables.
    file: Mapping[str, Any] = field(default_factory=dict)
    #: Where ``toolbus.toml`` was read from (paths in it are relative to its folder).
    file_path: Path | None = None


def read_settings_file(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError([Problem(f"settings file {path}", "", f"cannot be read: {exc}")]) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            [Problem(f"settings file {path}", "", f"is not valid TOML: {exc}")]
        ) from exc


def load_settings(
    broker: str | None = None,
    config: str | os.PathLike[str] | None = None,
    *,
    state: str | None = None,
    cwd: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Resolve settings from flags, then the environment, then ``toolbus.toml``."""
    env = os.environ if environ is None else environ
    here = cwd or Path.cwd()
    file_path = here / SETTINGS_FILE
    file = read_settings_file(file_path) if file_path.is_file() else {}

    config_path: Path | None
    if config is not None:
        config_path = Path(config)
    elif env.get("TOOLBUS_CONFIG"):
        config_path = Path(env["TOOLBUS_CONFIG"])
    elif isinstance(file.get("config"), str):
        config_path = file_path.parent / file["config"]
    else:
        config_path = None

    problems = [
        Problem(f"settings file {file_path}", name, "must be a table")
        for name in ("broker-options", "state-options")
        if not isinstance(file.get(name, {}), dict)
    ]
    state_in_file = file.get("state")
    if state_in_file is not None and not (isinstance(state_in_file, str) and state_in_file):
        problems.append(
            Problem(
                f"settings file {file_path}",
                "state",
                'must be a state store URL such as "memory://", "nats://host:4222" or '
                '"redis://host:6379"',
            )
        )
    seal_keys: tuple[str, ...] = ()
    if env.get("TOOLBUS_SEAL_KEYS"):
        seal_keys = tuple(part.strip() for part in env["TOOLBUS_SEAL_KEYS"].split(",") if part)
    elif "seal-keys" in file:
        given = file["seal-keys"]
        if isinstance(given, list) and given and all(isinstance(k, str) and k for k in given):
            seal_keys = tuple(
                k if k.startswith("env:") else str(file_path.parent / k) for k in given
            )
        else:
            problems.append(
                Problem(
                    f"settings file {file_path}",
                    "seal-keys",
                    "must be a list of key sources, the sealing key first, such as "
                    '["env:TOOLBUS_SEAL_KEY"] or ["seal-2026-11.jwk"]',
                )
            )
    if problems:
        raise ConfigError(problems)
    named = broker or env.get("TOOLBUS_BROKER") or file.get("broker")
    return Settings(
        broker=str(named or DEFAULT_BROKER),
        broker_named=bool(named),
        config=config_path,
        broker_options=file.get("broker-options", {}),
        state=state or env.get("TOOLBUS_STATE") or state_in_file,
        state_options=file.get("state-options", {}),
        seal_keys=seal_keys,
        file=file,
        file_path=file_path if file_path.is_file() else None,
    )
