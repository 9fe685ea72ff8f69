"""A tool call's arguments as the parts of an HTTP request: checked, encoded, never trusted.

Path parameters are percent-encoded whole; values that could move the request
elsewhere are refused. Every refusal is a :class:`~toolbus.BadRequest` that
names the argument and never quotes more than the start of its value.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from toolbus.domain.errors import BadRequest
from toolbus_openapi.operations import Operation

_ABSOLUTE_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*:)?//")


def check_arguments(operation: Operation, arguments: Mapping[str, Any]) -> None:
    """Refuse arguments the operation does not take, and missing required ones."""
    known = {str(argument["name"]) for argument in operation.arguments}
    unknown = sorted(set(arguments) - known)
    if unknown:
        raise BadRequest(
            f"{operation.tool}: unknown argument(s) {', '.join(unknown)}; "
            f"it takes {', '.join(sorted(known)) or 'no arguments'}"
        )
    missing = [
        str(argument["name"])
        for argument in operation.arguments
        if argument.get("required") and arguments.get(str(argument["name"])) is None
    ]
    if missing:
        raise BadRequest(f"{operation.tool}: missing required argument(s) {', '.join(missing)}")


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


def query_pairs(name: str, value: Any, explode: bool) -> list[tuple[str, str]]:
    """A query parameter's ``(name, value)`` pairs, in OpenAPI's ``form`` style."""
    if isinstance(value, list):
        items = [scalar(item) for item in value]
        return [(name, item) for item in items] if explode else [(name, ",".join(items))]
    if isinstance(value, dict):
        if explode:
            return [(str(key), scalar(item)) for key, item in value.items()]
        flat = [part for key, item in value.items() for part in (str(key), scalar(item))]
        return [(name, ",".join(flat))]
    return [(name, scalar(value))]


def header_value(operation: Operation, argument: str, value: Any) -> str:
    text = scalar(value)
    if "\r" in text or "\n" in text:
        raise BadRequest(f"{operation.tool}: header parameter {argument} may not span lines")
    return text
