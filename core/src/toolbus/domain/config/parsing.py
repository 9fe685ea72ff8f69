"""Configuration text to values: strict JSON, one section in one place, values named in messages.

Shared by the descriptor loader, hooks and permissions, and by whatever reads
configuration files (:mod:`toolbus.application.live.config_files`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from toolbus.domain.errors import ConfigError, Problem


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json.loads silently keeps the last of two equal keys; in configuration that
    # hides a mistake, so we refuse it.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"key {key!r} appears twice in one object; keep one")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON; write a number or a string")


def parse_json(text: str) -> Any:
    """Parse strict JSON: no duplicate keys, no ``NaN``/``Infinity``. Raises ``ValueError``."""
    try:
        return json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except json.JSONDecodeError as exc:
        raise ValueError(
            f"is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise ValueError("is not valid JSON: nested too deeply") from None


def section_in_one_place(
    section: str,
    snapshot: Mapping[str, Any] | None,
    settings: Mapping[str, Any] | None,
    *,
    settings_name: str,
    settings_table: str,
) -> tuple[Any, str] | None:
    """``section`` from a snapshot or from ``toolbus.toml`` (``settings``), and where it was.

    At most one of the two may hold it: two sources would leave the reader
    guessing which applies (:class:`ConfigError` names both). None when neither does.
    """
    in_snapshot = snapshot is not None and section in snapshot
    in_settings = settings is not None and section in settings
    if in_snapshot and in_settings:
        message = (
            f"are given both in the configuration snapshot and in {settings_name}; "
            "keep them in one place"
        )
        raise ConfigError([Problem(section, "", message)])
    if in_snapshot:
        assert snapshot is not None
        return snapshot[section], f"snapshot section {section!r}"
    if in_settings:
        assert settings is not None
        return settings[section], f"{settings_name} {settings_table}"
    return None


def describe(value: Any) -> str:
    """A value as the user wrote it in JSON, for messages: ``the string "x"``, ``an array``."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list | tuple):
        return "an array"
    kind = "the string" if isinstance(value, str) else "the number"
    text = json.dumps(value) if isinstance(value, str | int | float) else repr(value)
    if len(text) > 40:
        text = text[:37] + "..."
    return f"{kind} {text}"
