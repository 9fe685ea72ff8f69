"""Checking a tool descriptor: type, service, arguments, groups, states and config values."""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.arguments import parse_options
from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.config._fields import Problems, did_you_mean, required_text, string_list
from toolbus.domain.config.descriptors import (
    AFTER_EXECUTION_VALUES,
    ANNOTATION_HINTS,
    APPLICABLE_STATES_KEYS,
    DEFAULT_GROUP,
    JSON_SCHEMA_TYPES,
    TASK_SUPPORT_VALUES,
    TOOL_FIELDS,
    TOOL_SERVICE_TYPE,
    ApprovalRule,
    ServiceDescriptor,
    ToolArgument,
    ToolDescriptor,
)
from toolbus.domain.config.parsing import describe

_ARGUMENT_FIELDS = frozenset({"name", "type", "description", "required"})
_HAS_LETTER_OR_DIGIT = re.compile(r"[A-Za-z0-9]")


def _arguments(value: Any, where: str, problems: Problems) -> tuple[ToolArgument, ...]:
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
                suggestion = did_you_mean(kind, JSON_SCHEMA_TYPES) if isinstance(kind, str) else ""
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


_APPROVAL_FORMS = '"always", or {"approvers": "<team of [approvals.teams]>", "timeout": <seconds>}'


def _approval(value: Any, where: str, problems: Problems) -> ApprovalRule | None:
    """``approval``: ``"always"``, or an object naming the approvers and a timeout."""
    if value is None:
        return None
    if value == "always":
        return ApprovalRule()
    if not isinstance(value, dict):
        problems.add(where, "approval", f"{describe(value)} is not allowed; use {_APPROVAL_FORMS}")
        return None
    before = len(problems)
    unknown = sorted(set(value) - {"approvers", "timeout"})
    if unknown:
        problems.add(
            where, "approval", f"unknown key(s) {unknown}; an approval takes {_APPROVAL_FORMS}"
        )
    team = value.get("approvers")
    if team is not None and (not isinstance(team, str) or not team):
        problems.add(
            where,
            "approval.approvers",
            f"must name a team of [approvals.teams], not {describe(team)}",
        )
    timeout = value.get("timeout")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        problems.add(
            where,
            "approval.timeout",
            f"must be a positive number of seconds, not {describe(timeout)}",
        )
    if len(problems) > before:
        return None
    return ApprovalRule(team, None if timeout is None else float(timeout))


def _annotations(value: Any, where: str, problems: Problems) -> dict[str, bool]:
    """``annotations``: MCP's boolean hints about the tool, by MCP's names."""
    if value is None:
        return {}
    hints = ", ".join(ANNOTATION_HINTS)
    if not isinstance(value, dict):
        problems.add(
            where, "annotations", f"must be an object of MCP hints ({hints}), not {describe(value)}"
        )
        return {}
    found: dict[str, bool] = {}
    for key, hint in value.items():
        if key == "title":
            continue  # MCP's display name: nothing a policy decides on
        if key not in ANNOTATION_HINTS:
            problems.add(
                where, f"annotations.{key}", f"is not an MCP tool hint; the hints are {hints}"
            )
        elif not isinstance(hint, bool):
            problems.add(
                where, f"annotations.{key}", f"must be true or false, not {describe(hint)}"
            )
        else:
            found[key] = hint
    return found


def _applicable_states(
    raw: Mapping[str, Any], where: str, problems: Problems
) -> tuple[str, ...] | None:
    given = [key for key in APPLICABLE_STATES_KEYS if key in raw]
    if not given:
        return None
    values = [string_list(raw[key], where, key, problems) for key in given]
    if any(set(v) != set(values[0]) for v in values[1:]):
        problems.add(
            where,
            given[0],
            f"is given as {' and '.join(map(repr, given))} with different values; "
            f"keep only {APPLICABLE_STATES_KEYS[0]!r}",
        )
    return values[0]


def _typos(
    raw: Mapping[str, Any], service: ServiceDescriptor | None, where: str, problems: Problems
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


def tool_label(key: str, raw: Mapping[str, Any]) -> str:
    name = raw.get("name")
    if isinstance(name, str) and name and name != key:
        return f"tool {key!r} (name {name!r})"
    return f"tool {key!r}"


def check_tool(
    key: str,
    raw: dict[str, Any],
    services: Mapping[str, ServiceDescriptor],
    broken_services: set[str],
    tool_types: frozenset[str],
    problems: Problems,
) -> ToolDescriptor | None:
    where = tool_label(key, raw)
    before = len(problems)

    tool_type = raw.get("type")
    if tool_type is None:
        problems.add(where, "type", f"is required; use {TOOL_SERVICE_TYPE!r} for a tool service")
    elif not isinstance(tool_type, str) or tool_type not in tool_types:
        problems.add(
            where,
            "type",
            f"{describe(tool_type)} is not a known tool type; "
            + (f"{did_you_mean(tool_type, tool_types)} " if isinstance(tool_type, str) else "")
            + f"Known types: {', '.join(sorted(tool_types)) or 'none'} (plugins add more)",
        )

    name = required_text(raw, "name", where, problems)
    if name and not _HAS_LETTER_OR_DIGIT.search(sanitize_toolname(name)):
        problems.add(
            where,
            "name",
            f"{name!r} has no ASCII letter or digit, so the LLM would see it as "
            f"{sanitize_toolname(name)!r}; use a name with letters or digits",
        )
    description = required_text(raw, "description", where, problems)

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
                did_you_mean(service_id, known)
                or f"configured services: {', '.join(known) or 'none'}"
            ),
        )

    arguments = _arguments(raw.get("arguments"), where, problems)
    groups = (
        string_list(raw["group"], where, "group", problems) if "group" in raw else (DEFAULT_GROUP,)
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

    approval = _approval(raw.get("approval"), where, problems)
    annotations = _annotations(raw.get("annotations"), where, problems)
    task_support = raw.get("task-support", "optional")
    if task_support not in TASK_SUPPORT_VALUES:
        problems.add(
            where,
            "task-support",
            f"{describe(task_support)} is not allowed; use 'optional' (a call runs as a task "
            "when its caller asks or it waits for a person, the default), 'required' (every "
            "call is a task) or 'forbidden' (callers wait in place)",
        )
    additional = raw.get("additional-arguments", False)
    if not isinstance(additional, bool):
        problems.add(
            where,
            "additional-arguments",
            f"must be true (calls may give arguments the tool does not declare) or false, "
            f"not {describe(additional)}",
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
        approval=approval,
        annotations=annotations,
        task_support=str(task_support),
        additional_arguments=additional is True,
    )
