"""Configuration snapshots: the descriptor models, reading a snapshot, validating it.

A snapshot is ``{"tool-service": {id: descriptor}, "tool": {key: descriptor}}``
(DESIGN.md §3), each descriptor a JSON object or a JSON string holding one, as
TrustGraph's config service stores them. :func:`load_registry` turns a snapshot
into an immutable :class:`~toolbus.domain.config.registry.Registry` or raises one
:class:`~toolbus.domain.errors.ConfigError` listing *every* problem: loading is
all-or-nothing, so a bad snapshot can never half-replace a good one.

Reading files lives here too (:func:`read_snapshot`) because it is plain,
synchronous and shared by the CLI and the application layer; nothing here
touches a network or an event loop.
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from toolbus.domain.calls.arguments import NO_OPTIONS, ArgumentOptions, parse_options
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.calls.queues import QueueName, parse_queue
from toolbus.domain.config.registry import DEFAULT_GROUP, Registry
from toolbus.domain.errors import ConfigError, Problem, QueueNameError

SERVICES = "tool-service"
TOOLS = "tool"
TOOL_SERVICE_TYPE = "tool-service"
BUILTIN_TOOL_TYPES: frozenset[str] = frozenset({TOOL_SERVICE_TYPE})

# The canonical key comes first: it is the one TrustGraph's code and CLI write.
APPLICABLE_STATES_KEYS = ("applicable-states", "available_in_states", "available-in-states")
JSON_SCHEMA_TYPES = frozenset({"string", "number", "integer", "boolean", "array", "object", "null"})
TOOL_FIELDS = frozenset(
    {
        "type",
        "name",
        "description",
        "service",
        "arguments",
        "group",
        "state",
        "options",
        "after-execution",
    }
    | set(APPLICABLE_STATES_KEYS)
)
AFTER_EXECUTION_VALUES = ("suspend", "terminate")
_ARGUMENT_FIELDS = frozenset({"name", "type", "description", "required"})
_HAS_LETTER_OR_DIGIT = re.compile(r"[A-Za-z0-9]")


# --------------------------------------------------------------------------- models


@dataclass(frozen=True, slots=True)
class ConfigParam:
    """A configuration value a tool service accepts from each tool that uses it."""

    name: str
    required: bool = False


@dataclass(frozen=True, slots=True)
class ServiceDescriptor:
    """Tier 1: where a tool service listens and which config values it accepts."""

    id: str
    request_queue: str
    response_queue: str
    config_params: tuple[ConfigParam, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolArgument:
    """One argument the LLM supplies, described the way JSON Schema describes a property."""

    name: str
    type: str
    description: str = ""
    required: bool = True
    # Further JSON-Schema keywords (enum, default, minimum, items, ...), passed to the LLM as is.
    schema_extras: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _freeze(self, "schema_extras")


@dataclass(frozen=True, slots=True)
class ToolDescriptor:
    """Tier 2: a tool as the agent and the LLM see it.

    ``llm_name`` is derived from ``name`` (:func:`~toolbus.domain.calls.naming.sanitize_toolname`),
    so it always is a valid function name. ``groups`` is ``("default",)`` when the
    descriptor has no ``group`` and ``()`` for an explicit empty list; those differ.
    ``applicable_states`` is ``None`` when the tool is offered in every state.
    ``config`` holds only the values the tool's service declares in
    ``config-params``; ``raw`` is the whole descriptor, for tool types added by
    plugins that read keys of their own.
    """

    key: str
    type: str
    name: str
    llm_name: str = field(init=False)
    description: str
    service: str | None = None
    arguments: tuple[ToolArgument, ...] = ()
    groups: tuple[str, ...] = (DEFAULT_GROUP,)
    state: str | None = None
    applicable_states: tuple[str, ...] | None = None
    config: Mapping[str, Any] = field(default_factory=dict, hash=False)
    raw: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: ``options``: argument defaults, fixed values and environment values.
    options: ArgumentOptions = field(default=NO_OPTIONS, hash=False)
    #: ``after-execution``: "suspend" (the agent goes on) or "terminate" (final answer).
    after_execution: str = "suspend"

    def __post_init__(self) -> None:
        object.__setattr__(self, "llm_name", sanitize_toolname(self.name))
        _freeze(self, "config")
        _freeze(self, "raw")


def _freeze(instance: object, attribute: str) -> None:
    # Descriptors are shared by every request that uses a registry: give out
    # read-only views so one caller cannot change what the next one sees.
    value = getattr(instance, attribute)
    if not isinstance(value, MappingProxyType):
        object.__setattr__(instance, attribute, MappingProxyType(dict(value)))


# --------------------------------------------------------------------------- reading


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
                    f"holds {_describe(value)}; a snapshot is a JSON object like "
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


# --------------------------------------------------------------------------- validation


class _Problems:
    """Collects problems so that validation reports all of them at once."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, where: str, field_name: str, message: str) -> None:
        self.items.append(Problem(where, field_name, message))

    def __len__(self) -> int:
        return len(self.items)


def _describe(value: Any) -> str:
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
            f"must be a JSON object (or a JSON string holding one), not {_describe(value)}",
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
            f"must be an object mapping each key to a descriptor, not {_describe(value)}",
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
        f'must be a list of strings like ["a", "b"], not {_describe(value)}{hint}',
    )
    return ()


def _required_text(raw: Mapping[str, Any], name: str, where: str, problems: _Problems) -> str:
    value = raw.get(name)
    if value is None:
        problems.add(where, name, "is required")
        return ""
    if not isinstance(value, str) or not value.strip():
        problems.add(where, name, f"must be a non-empty string, not {_describe(value)}")
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
            f"not {_describe(value)}",
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
                    where, at, f"'required' must be true or false, not {_describe(required)}"
                )
                continue
        else:
            problems.add(
                where,
                at,
                f'must be a name or {{"name": ..., "required": ...}}, not {_describe(item)}',
            )
            continue
        if not isinstance(name, str) or not name:
            problems.add(where, at, f"needs a non-empty string 'name', not {_describe(name)}")
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
            f"is {_describe(declared_id)}, but the service is stored under key {key!r}, "
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
                where, name, f"must be a non-empty queue name ({example}), not {_describe(value)}"
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
    if len(problems) > before:
        return None
    return ServiceDescriptor(key, raw["request-queue"], raw["response-queue"], params)


def _arguments(value: Any, where: str, problems: _Problems) -> tuple[ToolArgument, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        problems.add(
            where,
            "arguments",
            f'must be a list like [{{"name": "topic", "type": "string", "description": "..."}}], '
            f"not {_describe(value)}",
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
                f"must be an object with 'name', 'type', 'description', not {_describe(item)}",
            )
            continue
        name: Any = item.get("name")
        kind: Any = item.get("type")
        description: Any = item.get("description")
        required: Any = item.get("required", True)
        before = len(problems)
        if not isinstance(name, str) or not name:
            problems.add(where, at, f"needs a non-empty string 'name', not {_describe(name)}")
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
                    f"{of}'type' is {_describe(kind)}, not a JSON Schema type; "
                    + (f"{suggestion} " if suggestion else "")
                    + f"Use one of: {types}"
                )
            problems.add(where, at, message)
        if not isinstance(description, str):
            problems.add(
                where,
                at,
                f"{of}needs a string 'description' telling the LLM what to pass, "
                f"not {_describe(description)}",
            )
        if not isinstance(required, bool):
            problems.add(
                where, at, f"{of}'required' must be true or false, not {_describe(required)}"
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
            f"{_describe(tool_type)} is not a known tool type; "
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
        problems.add(where, "service", f"must be a tool-service id, not {_describe(service_id)}")
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
            where, "state", f"must be a string naming the next state, not {_describe(state)}"
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
            f"{_describe(after_execution)} is not allowed; use 'suspend' (the agent goes on, "
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
            f"not {_describe(snapshot)}",
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


def load_registry_from_path(
    source: str | os.PathLike[str], *, tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
) -> Registry:
    """:func:`read_snapshot` then :func:`load_registry`; raises :class:`ConfigError`."""
    return load_registry(read_snapshot(source), tool_types=tool_types)
