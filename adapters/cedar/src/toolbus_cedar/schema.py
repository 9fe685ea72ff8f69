"""The Cedar schema policies are checked against, made from the configuration.

Nobody writes it by hand: it says what toolbus knows, so that a policy naming
an argument no tool has, or comparing a string with a number, is refused when
the door starts, not found out on some call later.

* ``User`` (the principal) is in the ``Group`` entities of the groups granted to
  the session, and has the attributes ``[policy.users.NAME]`` gives users, each
  optional (users may lack one);
* ``Tool`` (the resource) is in its groups and its ``Service``, and has
  ``name``, ``service`` (absent for tools of a plugin type with no service) and
  ``annotations`` (MCP's hints, each optional);
* the one action is ``Action::"call"``; its context has the session's
  ``state`` and the call's ``arguments``: every argument some tool declares,
  each optional, typed from the tools' declarations (``string`` → ``String``,
  ``integer`` → ``Long``, ``number`` → ``decimal``, ``boolean`` → ``Bool``, an
  ``array`` of those → ``Set``). An argument two tools declare with different
  types, or of a type Cedar has no value for (``object``), is left out: a
  policy naming it is refused, saying why.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolbus.domain.config.descriptors import ANNOTATION_HINTS, ToolArgument, ToolDescriptor

#: JSON Schema types of tool arguments, as Cedar types.
_CEDAR_TYPES = {"string": "String", "integer": "Long", "number": "decimal", "boolean": "Bool"}


class ValueProblem(ValueError):
    """An argument's value that Cedar cannot hold as the schema types it."""


@dataclass(frozen=True, slots=True)
class CallSchema:
    """The schema's text, and what it knows of the arguments and the users' attributes."""

    text: str
    #: Argument name -> its Cedar type.
    arguments: Mapping[str, str]
    #: Argument name -> why policies cannot use it (left out of the schema).
    unusable: Mapping[str, str] = field(default_factory=dict)
    user_attributes: Mapping[str, str] = field(default_factory=dict)


def argument_type(argument: ToolArgument) -> str | None:
    """The Cedar type of a tool argument, or ``None`` when Cedar has none for it."""
    if argument.type in _CEDAR_TYPES:
        return _CEDAR_TYPES[argument.type]
    if argument.type == "array":
        items = argument.schema_extras.get("items")
        item = items.get("type") if isinstance(items, Mapping) else None
        if isinstance(item, str) and item in _CEDAR_TYPES:
            return f"Set<{_CEDAR_TYPES[item]}>"
    return None


def value_type(value: Any) -> str | None:
    """The Cedar type of a user attribute's value from ``toolbus.toml``."""
    if isinstance(value, bool):
        return "Bool"
    if isinstance(value, int):
        return "Long"
    if isinstance(value, str):
        return "String"
    if isinstance(value, list) and value and all(isinstance(item, str) for item in value):
        return "Set<String>"
    return None


def call_schema(
    tools: Iterable[ToolDescriptor], users: Mapping[str, Mapping[str, Any]]
) -> CallSchema:
    """The schema for ``tools`` and what ``users`` say of each user (checked elsewhere)."""
    declared: dict[str, tuple[str, str]] = {}
    unusable: dict[str, str] = {}
    for tool in tools:
        for argument in tool.arguments:
            name = argument.name
            if name in unusable:
                continue
            cedar = argument_type(argument)
            if cedar is None:
                unusable[name] = (
                    f"tool {tool.name!r} declares it as {argument.type!r}, which Cedar "
                    "cannot compare"
                )
                declared.pop(name, None)
                continue
            seen = declared.get(name)
            if seen is not None and seen[0] != cedar:
                unusable[name] = (
                    f"tools {seen[1]!r} and {tool.name!r} declare it with different types "
                    f"({seen[0]} and {cedar}); give it one type"
                )
                declared.pop(name)
                continue
            declared.setdefault(name, (cedar, tool.name))
    attributes: dict[str, str] = {}
    for attrs in users.values():
        for name, value in attrs.items():
            cedar_type = value_type(value)
            if cedar_type is not None:
                attributes.setdefault(name, cedar_type)
    arguments = {name: cedar for name, (cedar, _) in sorted(declared.items())}
    text = "\n".join(
        [
            "entity Group;",
            "entity Service;",
            f"entity User in [Group] {_record(attributes, optional=True)};",
            "type Annotations = "
            + _record(dict.fromkeys(ANNOTATION_HINTS, "Bool"), optional=True)
            + ";",
            'entity Tool in [Group, Service] { "name": String, "service"?: String, '
            '"annotations": Annotations };',
            f"type Arguments = {_record(arguments, optional=True)};",
            'action "call" appliesTo {',
            "  principal: [User],",
            "  resource: [Tool],",
            '  context: { "state": String, "arguments": Arguments },',
            "};",
        ]
    )
    return CallSchema(text, arguments, unusable, attributes)


def _record(attributes: Mapping[str, str], *, optional: bool) -> str:
    mark = "?" if optional else ""
    body = ", ".join(f"{json.dumps(name)}{mark}: {kind}" for name, kind in attributes.items())
    return "{ " + body + " }" if body else "{}"


def user_problems(users: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """(where, what is wrong) for every user attribute Cedar cannot hold or types two ways."""
    problems: list[tuple[str, str]] = []
    seen: dict[str, tuple[str, str]] = {}
    for user, attrs in users.items():
        for name, value in attrs.items():
            cedar = value_type(value)
            where = f"users.{user}.{name}"
            if cedar is None:
                problems.append(
                    (where, "must be a string, a whole number, true or false, or a list of strings")
                )
                continue
            first = seen.setdefault(name, (cedar, user))
            if first[0] != cedar:
                problems.append(
                    (
                        where,
                        f"is a {cedar}, but users.{first[1]}.{name} is a {first[0]}; "
                        "give the attribute one type",
                    )
                )
    return problems


def cedar_value(value: Any, cedar: str) -> Any:
    """An argument's JSON value as Cedar's JSON writes a value of type ``cedar``.

    Numbers of a ``decimal`` argument become Cedar decimals (at most four places
    after the point); a whole ``float`` of a ``Long`` argument becomes an
    integer. Anything else is left for the schema check to accept or refuse.
    """
    if cedar == "decimal" and isinstance(value, int | float) and not isinstance(value, bool):
        return {"__extn": {"fn": "decimal", "arg": _decimal_text(value)}}
    if cedar == "Long" and isinstance(value, float) and value.is_integer():
        return int(value)
    if cedar.startswith("Set<") and isinstance(value, list):
        inner = cedar[4:-1]
        return [cedar_value(item, inner) for item in value]
    return value


#: Cedar's Long: a signed 64-bit integer.
_LONG = range(-(2**63), 2**63)


def reads_plainly(value: Any, cedar: str) -> bool:
    """Whether an argument's JSON ``value``, as :func:`cedar_value` writes it, is plainly of
    type ``cedar``, so that Cedar reads it the same without the schema's check.

    A request made only of such values is one the schema would let through, and
    Cedar reads it the same without the schema; any other value goes to Cedar with
    the schema, which accepts or refuses it.
    """
    kind = type(value)
    if cedar == "String":
        return kind is str
    if cedar == "Long":
        if kind is float and value.is_integer():
            value, kind = int(value), int  # as cedar_value writes it
        return kind is int and value in _LONG
    if cedar == "Bool":
        return kind is bool
    if cedar == "decimal":
        return kind is int or kind is float  # cedar_value writes the decimal
    if cedar.startswith("Set<") and kind is list:
        inner = cedar[4:-1]
        return all(reads_plainly(item, inner) for item in value)
    return False


def _decimal_text(value: int | float) -> str:
    number = decimal.Decimal(repr(value)) if isinstance(value, float) else decimal.Decimal(value)
    exponent = number.as_tuple().exponent
    if not number.is_finite() or (isinstance(exponent, int) and exponent < -4):
        raise ValueProblem("has more than four decimal places, which policies cannot compare")
    text = f"{number:f}"
    return text if "." in text else text + ".0"
