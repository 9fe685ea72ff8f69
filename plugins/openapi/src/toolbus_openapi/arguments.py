"""A tool call's arguments as the parts of an HTTP request: checked, encoded, never trusted.

Arguments are validated against the operation's JSON Schema (by ``jsonschema``)
before anything is built: an unknown argument, a missing required one, or a
value of another type than its parameter's is refused. Only an
``object``-typed query parameter is expanded into pairs, and none of its keys
may be another parameter's name or a credential's. Path parameters are
percent-encoded whole; values that could move the request elsewhere are
refused. Every refusal is a :class:`~toolbus.BadRequest` that names the
argument and never quotes more than the start of its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import quote

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from toolbus.domain.errors import BadRequest
from toolbus_openapi.operations import Operation, Parameter

_ABSOLUTE_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//")
#: Characters of a validation message kept: it may quote the value.
_MESSAGE_LIMIT = 200


class ArgumentValidator:
    """Checks arguments against an operation's schema; one compiled validator per operation."""

    def __init__(self) -> None:
        self._validators: dict[str, Draft202012Validator] = {}

    def check(self, operation: Operation, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments to send (``null`` ones left out, as absent), or :class:`BadRequest`."""
        given = {name: value for name, value in arguments.items() if value is not None}
        validator = self._validators.get(operation.operation_id)
        if validator is None:
            validator = Draft202012Validator(operation.schema)
            self._validators[operation.operation_id] = validator
        if not validator.is_valid(given):  # the usual case first: no error objects made
            error = best_match(validator.iter_errors(given))
            assert error is not None
            raise BadRequest(f"{operation.tool}: {_explain(operation, error, given)}")
        return given


def _explain(operation: Operation, error: ValidationError, given: Mapping[str, Any]) -> str:
    if error.validator == "additionalProperties" and not error.path:
        known = sorted(str(argument["name"]) for argument in operation.arguments)
        unknown = sorted(set(given) - set(known))
        return (
            f"unknown argument(s) {', '.join(unknown)}; it takes "
            f"{', '.join(known) or 'no arguments'}"
        )
    if error.validator == "required" and not error.path:
        schema_required = operation.schema.get("required", ())
        missing = [name for name in schema_required if name not in given]
        return f"missing required argument(s) {', '.join(missing)}"
    where = ".".join(str(part) for part in error.absolute_path) or "arguments"
    message = error.message
    if len(message) > _MESSAGE_LIMIT:
        message = message[:_MESSAGE_LIMIT] + "…"
    return f"argument {where}: {message}"


def scalar(value: Any) -> str:
    """A value as text in a URL or header: JSON's ``true``/``false``, compact JSON for the rest."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return str(value)


def path_segment(operation: Operation, argument: str, value: Any) -> str:
    """One path parameter, percent-encoded whole; refused if it could move the request."""
    text = scalar(value)
    if text in ("", ".", "..") or "/" in text or "\\" in text or _ABSOLUTE_URL.match(text):
        raise BadRequest(
            f"{operation.tool}: path parameter {argument} may not be empty, '.' or '..', nor "
            f"contain '/' or '\\' or be a URL; got {text[:80]!r}"
        )
    return quote(text, safe="")


def query_pairs(
    operation: Operation, parameter: Parameter, value: Any, reserved: Collection[str]
) -> list[tuple[str, str]]:
    """A query parameter's ``(name, value)`` pairs, in OpenAPI's ``form`` style.

    An object value is expanded only for an ``object``-typed parameter, and
    none of its keys may be in ``reserved`` (the operation's other query
    parameters and the credentials' names).
    """
    name, explode = parameter.name, parameter.explode
    if isinstance(value, list):
        items = [scalar(item) for item in value]
        return [(name, item) for item in items] if explode else [(name, ",".join(items))]
    if isinstance(value, dict):
        if not parameter.object_typed:
            raise BadRequest(
                f"{operation.tool}: query parameter {parameter.argument} takes a single value, "
                "not an object"
            )
        if explode:
            taken = sorted(str(key) for key in value if str(key) in reserved)
            if taken:
                raise BadRequest(
                    f"{operation.tool}: query parameter {parameter.argument} may not set "
                    f"{', '.join(taken)}: the operation's own parameters and credentials are "
                    "set only as themselves"
                )
            return [(str(key), scalar(item)) for key, item in value.items()]
        flat = [part for key, item in value.items() for part in (str(key), scalar(item))]
        return [(name, ",".join(flat))]
    return [(name, scalar(value))]


def header_value(operation: Operation, argument: str, value: Any) -> str:
    text = scalar(value)
    if "\r" in text or "\n" in text:
        raise BadRequest(f"{operation.tool}: header parameter {argument} may not span lines")
    return text
