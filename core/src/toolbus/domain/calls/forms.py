"""What a form accepts: the content a person gives an elicitation, checked against its schema.

An elicitation asks for a flat JSON Schema object of primitive properties
(strings, numbers, integers, booleans, enumerations). A door that takes the
answer from its caller as data (an HTTP body, an A2A message) checks the
content before the tool sees it, so a caller hears at once which field is
wrong and what it takes, rather than the tool asking again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any


def form_fields(schema: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """The form's fields by name (the schema's ``properties`` that describe one)."""
    properties = schema.get("properties")
    if not isinstance(properties, Mapping):
        return {}
    return {name: field for name, field in properties.items() if isinstance(field, Mapping)}


def expected_value(field: Mapping[str, Any]) -> str:
    """What ``field`` takes, in words: ``true or false``, ``one of "a", "b"``..."""
    if "enum" in field and isinstance(field["enum"], list):
        return "one of " + ", ".join(json.dumps(option) for option in field["enum"])
    return {"boolean": "true or false", "integer": "an integer", "number": "a number"}.get(
        str(field.get("type")), "a string"
    )


def _fits(field: Mapping[str, Any], value: Any) -> bool:
    if "enum" in field and isinstance(field["enum"], list):
        return value in field["enum"]
    kind = field.get("type")
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    return True


def form_problem(schema: Mapping[str, Any], content: Mapping[str, Any]) -> str | None:
    """What is wrong with ``content`` as the form ``schema`` asks it, or ``None``."""
    fields = form_fields(schema)
    required = schema.get("required")
    for name in required if isinstance(required, list) else []:
        if name not in content:
            return f"the form requires {name!r} ({expected_value(fields.get(name, {}))})"
    for name, value in content.items():
        field = fields.get(name)
        if field is None:
            return f"the form has no field {name!r}; it has {', '.join(map(repr, fields))}"
        if not _fits(field, value):
            return f"{name!r} must be {expected_value(field)}, not {json.dumps(value)}"
    return None
