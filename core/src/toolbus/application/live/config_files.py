"""Reading configuration snapshots from files and directories.

The domain validates snapshots (:func:`~toolbus.domain.config.loading.load_registry`)
but never reads a file; this is where the bytes come from, for the command line
and for :func:`toolbus.runtime.open_tools`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.parsing import describe, parse_json
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem


def _read_json_file(path: Path, problems: list[Problem]) -> tuple[bool, Any]:
    where = f"file '{path}'"
    try:
        text = path.read_text(encoding="utf-8-sig")  # tolerate the BOM some editors write
    except UnicodeDecodeError as exc:
        problems.append(Problem(where, "", f"is not UTF-8 text ({exc.reason} at byte {exc.start})"))
        return False, None
    except OSError as exc:
        problems.append(Problem(where, "", f"cannot be read: {exc.strerror or exc}"))
        return False, None
    try:
        return True, parse_json(text)
    except ValueError as exc:
        problems.append(Problem(where, "", str(exc)))
        return False, None


def read_snapshot(source: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a snapshot from a JSON file or a directory.

    A file holds the whole snapshot: ``{"tool-service": {...}, "tool": {...}}``.
    A directory holds one file per descriptor, ``tool-service/<id>.json`` and
    ``tool/<key>.json``; the file name (without ``.json``) is the key. Every
    other sub-directory becomes a section the same way, and a top-level
    ``<name>.json`` becomes section ``<name>``, so later features (hooks,
    permissions) can keep their configuration alongside. Hidden entries and
    files not ending in ``.json`` are ignored.

    The result is not validated; pass it to :func:`load_registry`. Raises
    :class:`ConfigError` naming every file that is missing, unreadable or not JSON.
    """
    path = Path(source)
    problems: list[Problem] = []
    if path.is_dir():
        snapshot = _read_directory(path, problems)
    elif path.exists():
        ok, value = _read_json_file(path, problems)
        snapshot = {}
        if ok and not isinstance(value, dict):
            problems.append(
                Problem(
                    f"file '{path}'",
                    "",
                    f"holds {describe(value)}; a snapshot is a JSON object like "
                    '{"tool-service": {...}, "tool": {...}}',
                )
            )
        elif ok:
            snapshot = value
    else:
        problems.append(
            Problem(
                f"file '{path}'",
                "",
                "does not exist; give a snapshot JSON file or a directory holding "
                "tool-service/ and tool/",
            )
        )
    if problems:
        raise ConfigError(problems)
    return snapshot


def _visible(entries: Iterable[Path]) -> list[Path]:
    return sorted(p for p in entries if not p.name.startswith("."))


def _read_directory(root: Path, problems: list[Problem]) -> dict[str, Any]:
    snapshot: dict[str, Any] = {}
    try:
        entries = _visible(root.iterdir())
    except OSError as exc:
        problems.append(Problem(f"directory '{root}'", "", f"cannot be read: {exc.strerror}"))
        return snapshot
    for entry in entries:
        if entry.is_dir():
            section: dict[str, Any] = {}
            try:
                files = _visible(entry.iterdir())
            except OSError as exc:
                problems.append(
                    Problem(f"directory '{entry}'", "", f"cannot be read: {exc.strerror}")
                )
                continue
            for item in files:
                if item.suffix == ".json" and item.is_file():
                    ok, value = _read_json_file(item, problems)
                    if ok:
                        section[item.stem] = value
            _add_section(snapshot, entry.name, section, entry, problems)
        elif entry.suffix == ".json":
            ok, value = _read_json_file(entry, problems)
            if ok:
                _add_section(snapshot, entry.stem, value, entry, problems)
    return snapshot


def _add_section(
    snapshot: dict[str, Any], name: str, value: Any, origin: Path, problems: list[Problem]
) -> None:
    if name in snapshot:
        problems.append(
            Problem(
                f"'{origin}'",
                "",
                f"section {name!r} is given both as a directory and as a file; keep one",
            )
        )
        return
    snapshot[name] = value


def load_registry_from_path(
    source: str | os.PathLike[str], *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
) -> Registry:
    """:func:`read_snapshot` then :func:`load_registry`; raises :class:`ConfigError`."""
    return load_registry(read_snapshot(source), tool_types=tool_types)
