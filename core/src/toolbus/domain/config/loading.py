"""Validating a configuration snapshot and building the registry from it.

A snapshot is ``{"tool-service": {id: descriptor}, "tool": {key: descriptor}}``
(docs/configuration.md), each descriptor a JSON object or a JSON string holding one, as
TrustGraph's config service stores them. :func:`load_registry` turns a snapshot
into an immutable :class:`~toolbus.domain.config.registry.Registry` of
:mod:`~toolbus.domain.config.descriptors` or raises one
:class:`~toolbus.domain.errors.ConfigError` listing *every* problem: loading is
all-or-nothing, so a bad snapshot can never half-replace a good one. Reading a
snapshot from files is :mod:`toolbus.application.live.config_files`.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from toolbus.domain.calls.arguments import parse_options
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.calls.queues import QueueName, parse_queue
from toolbus.domain.calls.wire import NEWEST_GENERATION, generation_of
from toolbus.domain.config.descriptors import (
    AFTER_EXECUTION_VALUES,
    APPLICABLE_STATES_KEYS,
    BUILTIN_TOOL_TYPES,
    DEFAULT_GROUP,
    JSON_SCHEMA_TYPES,
    SERVICES,
    TOOL_FIELDS,
    TOOL_SERVICE_TYPE,
    TOOLS,
    TRUSTGRAPH_WIRE,
    ConfigParam,
    ServiceDescriptor,
    ToolArgument,
    ToolDescriptor,
)
from toolbus.domain.config.parsing import describe, parse_json
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem, QueueNameError, WireError

_ARGUMENT_FIELDS = frozenset({"name", "type", "description", "required"})
_HAS_LETTER_OR_DIGIT = re.compile(r"[A-Za-z0-9]")


class _Problems:
    """Collects problems so that validation reports all of them at once."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, where: str, field_name: str, message: str) -> None:
        self.items.append(Problem(where, field_name, message))

    def __len__(self) -> int:
        return len(self.items)


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def _descriptor(value: Any, where: str, problems: _Problems) -> dict[str, Any] | None:
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


def _section(snapshot: Mapping[str, Any], name: str, problems: _Problems) -> dict[str, Any]:
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


def _string_list(value: Any, where: str, field_name: str, problems: _Problems) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    hint = f"; write [{json.dumps(value)}]" if isinstance(value, str) else ""
    problems.add(
        where,
        field_name,
        f'must be a list of strings like ["a", "b"], not {describe(value)}{hint}',
    )
    return ()


def _required_text(raw: Mapping[str, Any], name: str, where: str, problems: _Problems) -> str:
    value = raw.get(name)
    if value is None:
        problems.add(where, name, "is required")
        return ""
    if not isinstance(value, str) or not value.strip():
        problems.add(where, name, f"must be a non-empty string, not {describe(value)}")
        return ""
    return value


def _config_params(value: Any, where: str, problems: _Problems) -> tuple[ConfigParam, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(
            where,
            "config-params",
            f'must be a list like [{{"name": "collection", "required": true}}, "style"], '
            f"not {describe(value)}",
        )
        return ()
    params: list[ConfigParam] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        at = f"config-params[{index}]"
        name: Any
        required: Any
        if isinstance(item, str):
            name, required = item, False
        elif isinstance(item, dict):
            name, required = item.get("name"), item.get("required", False)
            if not isinstance(required, bool):
                problems.add(
                    where, at, f"'required' must be true or false, not {describe(required)}"
                )
                continue
        else:
            problems.add(
                where,
                at,
                f'must be a name or {{"name": ..., "required": ...}}, not {describe(item)}',
            )
            continue
        if not isinstance(name, str) or not name:
            problems.add(where, at, f"needs a non-empty string 'name', not {describe(name)}")
            continue
        if name in seen:
            problems.add(where, at, f"declares {name!r} twice; keep one")
            continue
        seen.add(name)
        params.append(ConfigParam(name, required))
    return tuple(params)


def _service(key: str, raw: Mapping[str, Any], problems: _Problems) -> ServiceDescriptor | None:
    where = f"tool-service {key!r}"
    before = len(problems)
    declared_id = raw.get("id", key)
    if declared_id != key:
        problems.add(
            where,
            "id",
            f"is {describe(declared_id)}, but the service is stored under key {key!r}, "
            "which tools use to find it; make them the same",
        )
    queues: list[QueueName] = []
    for name, role in (("request-queue", "request"), ("response-queue", "response")):
        value = raw.get(name)
        example = f"e.g. 'non-persistent://tg/{role}/{key}'"
        if value is None:
            problems.add(where, name, f"is required; {example}")
        elif not isinstance(value, str) or not value:
            problems.add(
                where, name, f"must be a non-empty queue name ({example}), not {describe(value)}"
            )
        else:
            try:
                queues.append(parse_queue(value))
            except QueueNameError as exc:
                problems.add(where, name, str(exc))
    if len(queues) == 2 and (
        queues[0].topic == queues[1].topic or queues[0].dotted == queues[1].dotted
    ):
        problems.add(
            where,
            "response-queue",
            f"names the same queue as 'request-queue' ({queues[0].raw!r}); the service would "
            "read its own responses as requests, so give the responses a queue of their own",
        )
    params = _config_params(raw.get("config-params"), where, problems)
    generation = NEWEST_GENERATION
    version = raw.get(TRUSTGRAPH_WIRE, NEWEST_GENERATION)
    if not isinstance(version, str):
        problems.add(
            where,
            TRUSTGRAPH_WIRE,
            f"must be a string such as '2.1' or '2.4', not {describe(version)}",
        )
    else:
        try:
            generation = generation_of(version)
        except WireError as exc:
            problems.add(where, TRUSTGRAPH_WIRE, str(exc))
    if len(problems) > before:
        return None
    return ServiceDescriptor(key, raw["request-queue"], raw["response-queue"], params, generation)


def _arguments(value: Any, where: str, problems: _Problems) -> tuple[ToolArgument, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(
            where,
            "arguments",
            f'must be a list like [{{"name": "topic", "type": "string", "description": "..."}}], '
            f"not {describe(value)}",
        )
        return ()
    arguments: list[ToolArgument] = []
    seen: set[str] = set()
    for index, item in enumerate(value):
        at = f"arguments[{index}]"
        if not isinstance(item, dict):
            problems.add(
                where,
                at,
                f"must be an object with 'name', 'type', 'description', not {describe(item)}",
            )
            continue
        name: Any = item.get("name")
        kind: Any = item.get("type")
        description: Any = item.get("description")
        required: Any = item.get("required", True)
        before = len(problems)
        if not isinstance(name, str) or not name:
            problems.add(where, at, f"needs a non-empty string 'name', not {describe(name)}")
        elif name in seen:
            problems.add(where, at, f"argument {name!r} is declared twice; keep one")
        else:
            seen.add(name)
        # Say which argument when it has a name: indexes are hard to count in a long list.
        of = f"argument {name!r}: " if isinstance(name, str) and name else ""
        if kind not in JSON_SCHEMA_TYPES:
            types = ", ".join(sorted(JSON_SCHEMA_TYPES))
            if kind is None:
                message = f"{of}needs a 'type', one of: {types}"
            else:
                suggestion = _did_you_mean(kind, JSON_SCHEMA_TYPES) if isinstance(kind, str) else ""
                message = (
                    f"{of}'type' is {describe(kind)}, not a JSON Schema type; "
                    + (f"{suggestion} " if suggestion else "")
                    + f"Use one of: {types}"
                )
            problems.add(where, at, message)
        if not isinstance(description, str):
            problems.add(
                where,
                at,
                f"{of}needs a string 'description' telling the LLM what to pass, "
                f"not {describe(description)}",
            )
        if not isinstance(required, bool):
            problems.add(
                where, at, f"{of}'required' must be true or false, not {describe(required)}"
            )
        if len(problems) > before:
            continue
        extras = {k: v for k, v in item.items() if k not in _ARGUMENT_FIELDS}
        arguments.append(ToolArgument(name, kind, description, required, extras))
    return tuple(arguments)


def _applicable_states(
    raw: Mapping[str, Any], where: str, problems: _Problems
) -> tuple[str, ...] | None:
    given = [key for key in APPLICABLE_STATES_KEYS if key in raw]
    if not given:
        return None
    values = [_string_list(raw[key], where, key, problems) for key in given]
    if any(set(v) != set(values[0]) for v in values[1:]):
        problems.add(
            where,
            given[0],
            f"is given as {' and '.join(map(repr, given))} with different values; "
            f"keep only {APPLICABLE_STATES_KEYS[0]!r}",
        )
    return values[0]


def _typos(
    raw: Mapping[str, Any], service: ServiceDescriptor | None, where: str, problems: _Problems
) -> None:
    # A tool-service tool has no use for other keys: they are neither tool fields
    # nor forwarded. One that looks like a known key is almost certainly a typo,
    # and a silent one can matter: "groups" would put the tool in "default".
    declared = {p.name for p in service.config_params} if service else set()
    of_service = f" or a config param of tool-service {service.id!r}" if service else ""
    for key in raw:
        if key in TOOL_FIELDS or key in declared:
            continue
        close = difflib.get_close_matches(key, sorted(TOOL_FIELDS | declared), n=1, cutoff=0.8)
        if close:
            problems.add(
                where,
                key,
                f"is not a tool field{of_service}, so it would be ignored; "
                f"did you mean {close[0]!r}?",
            )


def _tool_label(key: str, raw: Mapping[str, Any]) -> str:
    name = raw.get("name")
    if isinstance(name, str) and name and name != key:
        return f"tool {key!r} (name {name!r})"
    return f"tool {key!r}"


def _tool(
    key: str,
    raw: dict[str, Any],
    services: Mapping[str, ServiceDescriptor],
    broken_services: set[str],
    tool_types: frozenset[str],
    problems: _Problems,
) -> ToolDescriptor | None:
    where = _tool_label(key, raw)
    before = len(problems)

    tool_type = raw.get("type")
    if tool_type is None:
        problems.add(where, "type", f"is required; use {TOOL_SERVICE_TYPE!r} for a tool service")
    elif not isinstance(tool_type, str) or tool_type not in tool_types:
        problems.add(
            where,
            "type",
            f"{describe(tool_type)} is not a known tool type; "
            + (f"{_did_you_mean(tool_type, tool_types)} " if isinstance(tool_type, str) else "")
            + f"Known types: {', '.join(sorted(tool_types)) or 'none'} (plugins add more)",
        )

    name = _required_text(raw, "name", where, problems)
    if name and not _HAS_LETTER_OR_DIGIT.search(sanitize_toolname(name)):
        problems.add(
            where,
            "name",
            f"{name!r} has no ASCII letter or digit, so the LLM would see it as "
            f"{sanitize_toolname(name)!r}; use a name with letters or digits",
        )
    description = _required_text(raw, "description", where, problems)

    service: ServiceDescriptor | None = None
    service_id = raw.get("service")
    if service_id is None:
        if tool_type == TOOL_SERVICE_TYPE:
            problems.add(
                where, "service", "is required for a 'tool-service' tool; name a tool-service id"
            )
    elif not isinstance(service_id, str):
        problems.add(where, "service", f"must be a tool-service id, not {describe(service_id)}")
    elif service_id in services:
        service = services[service_id]
    elif service_id not in broken_services:  # its own problems are reported already
        known = sorted(services) + sorted(broken_services)
        problems.add(
            where,
            "service",
            f"names tool-service {service_id!r}, which is not configured; "
            + (
                _did_you_mean(service_id, known)
                or f"configured services: {', '.join(known) or 'none'}"
            ),
        )

    arguments = _arguments(raw.get("arguments"), where, problems)
    groups = (
        _string_list(raw["group"], where, "group", problems) if "group" in raw else (DEFAULT_GROUP,)
    )
    if "*" in groups:
        problems.add(
            where,
            "group",
            "'*' is a wildcard only in requested groups, not in a tool's groups; "
            "list the groups the tool belongs to by name",
        )
    state = raw.get("state")
    if state is not None and not isinstance(state, str):
        problems.add(
            where, "state", f"must be a string naming the next state, not {describe(state)}"
        )
    applicable = _applicable_states(raw, where, problems)

    config: dict[str, Any] = {}
    if service is not None:
        for param in service.config_params:
            if param.name in raw:
                config[param.name] = raw[param.name]
            elif param.required:
                problems.add(
                    where,
                    param.name,
                    f"is a required config param of tool-service {service.id!r}; "
                    f'add "{param.name}": <value> to the tool',
                )
    if tool_type == TOOL_SERVICE_TYPE:
        _typos(raw, service, where, problems)

    options, option_problems = parse_options(raw.get("options"))
    for field_name, message in option_problems:
        problems.add(where, field_name, message)
    after_execution = raw.get("after-execution", "suspend")
    if after_execution not in AFTER_EXECUTION_VALUES:
        problems.add(
            where,
            "after-execution",
            f"{describe(after_execution)} is not allowed; use 'suspend' (the agent goes on, "
            "the default) or 'terminate' (the result is the final answer)",
        )

    if len(problems) > before:
        return None
    return ToolDescriptor(
        key=key,
        type=str(tool_type),
        name=name,
        description=description,
        service=service.id if service else None,
        arguments=arguments,
        groups=groups,
        # TrustGraph treats an empty state as "no transition"; so do we.
        state=state or None,
        applicable_states=applicable,
        config=config,
        raw=raw,
        options=options,
        after_execution=str(after_execution),
    )


def _check_names(named: Iterable[tuple[str, str, str]], problems: _Problems) -> None:
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
    problems = _Problems()
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
        service = _service(key, raw, problems) if raw is not None else None
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
        tool = _tool(key, raw, services, broken, known_types, problems)
        if tool is not None:
            tools.append(tool)
        name = raw.get("name")
        if isinstance(name, str) and name.strip():
            named.append((key, name, _tool_label(key, raw)))
    _check_names(named, problems)

    if problems:
        raise ConfigError(problems.items)
    return Registry(services, tools, snapshot)
