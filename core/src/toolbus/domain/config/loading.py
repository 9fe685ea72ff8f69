"""Validating a configuration snapshot and building the registry from it.

A snapshot is ``{"tool-service": {id: descriptor}, "tool": {key: descriptor}}``
(docs/configuration.md), each descriptor a JSON object or a JSON string holding one, as
TrustGraph's config service stores them. :func:`load_registry` turns a snapshot
into an immutable :class:`~toolbus.domain.config.registry.Registry` of
:mod:`~toolbus.domain.config.descriptors` or raises one
:class:`~toolbus.domain.errors.ConfigError` listing *every* problem: loading is
all-or-nothing, so a bad snapshot can never half-replace a good one. Reading a
snapshot from files is :mod:`toolbus.application.live.config_files`.

This module checks the snapshot as a whole (its sections, unique names); each
descriptor is checked by a private module beside it: ``_services`` and
``_tools``, with what both read fields with in ``_fields``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.config._fields import Problems
from toolbus.domain.config._services import check_service
from toolbus.domain.config._tools import check_tool, tool_label
from toolbus.domain.config.descriptors import (
    BUILTIN_TOOL_TYPES,
    SERVICES,
    TOOLS,
    ServiceDescriptor,
    ToolDescriptor,
)
from toolbus.domain.config.parsing import describe, parse_json
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError


def _descriptor(value: Any, where: str, problems: Problems) -> dict[str, Any] | None:
    """A descriptor as a dict; TrustGraph's config service stores them as JSON strings."""
    if isinstance(value, str):
        try:
            value = parse_json(value)
        except ValueError as exc:
            problems.add(where, "", f"descriptor string {exc}")
            return None
    if not isinstance(value, dict):
        problems.add(
            where,
            "",
            f"must be a JSON object (or a JSON string holding one), not {describe(value)}",
        )
        return None
    return value


def _section(snapshot: Mapping[str, Any], name: str, problems: Problems) -> dict[str, Any]:
    value = snapshot.get(name)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.add(
            f"snapshot section {name!r}",
            "",
            f"must be an object mapping each key to a descriptor, not {describe(value)}",
        )
        return {}
    return dict(value)


def _check_names(named: Iterable[tuple[str, str, str]], problems: Problems) -> None:
    """Names and LLM names must be unique. ``named`` holds (key, name, where) per tool.

    Every tool with a usable name takes part, even one with other problems, so
    that a clash is reported in the same round as everything else.
    """
    by_name: dict[str, str] = {}
    by_llm_name: dict[str, tuple[str, str]] = {}
    for key, name, where in named:
        if name in by_name:
            problems.add(
                where,
                "name",
                f"{name!r} is also the name of tool {by_name[name]!r}; tool names must be unique",
            )
            continue
        by_name[name] = key
        llm_name = sanitize_toolname(name)
        if llm_name in by_llm_name:
            other_key, other_name = by_llm_name[llm_name]
            problems.add(
                where,
                "name",
                f"{name!r} and the name {other_name!r} of tool {other_key!r} both become "
                f"the LLM function name {llm_name!r}; rename one of them",
            )
            continue
        by_llm_name[llm_name] = (key, name)


def load_registry(
    snapshot: Mapping[str, Any], *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
) -> Registry:
    """Validate ``snapshot`` and build a :class:`Registry` from it.

    Raises :class:`ConfigError` listing every problem found; never returns a
    partial registry. ``tool_types`` are the tool types to accept (the built-in
    ``tool-service`` plus whatever plugins add). Top-level sections other than
    ``tool-service`` and ``tool`` are kept in :attr:`Registry.snapshot` but not
    checked here.
    """
    problems = Problems()
    given: object = snapshot  # callers may hand us whatever JSON held
    if not isinstance(given, Mapping):
        problems.add(
            "snapshot",
            "",
            f'must be an object like {{"tool-service": ..., "tool": ...}}, '
            f"not {describe(snapshot)}",
        )
        raise ConfigError(problems.items)
    known_types = frozenset(tool_types)

    services: dict[str, ServiceDescriptor] = {}
    broken: set[str] = set()
    for key, value in _section(snapshot, SERVICES, problems).items():
        raw = _descriptor(value, f"tool-service {key!r}", problems)
        service = check_service(key, raw, problems) if raw is not None else None
        if service is None:
            broken.add(key)
        else:
            services[key] = service

    tools: list[ToolDescriptor] = []
    named: list[tuple[str, str, str]] = []
    for key, value in _section(snapshot, TOOLS, problems).items():
        raw = _descriptor(value, f"tool {key!r}", problems)
        if raw is None:
            continue
        tool = check_tool(key, raw, services, broken, known_types, problems)
        if tool is not None:
            tools.append(tool)
        name = raw.get("name")
        if isinstance(name, str) and name.strip():
            named.append((key, name, tool_label(key, raw)))
    _check_names(named, problems)

    if problems:
        raise ConfigError(problems.items)
    return Registry(services, tools, snapshot)
