"""What an OpenAPI document's operations are called: their ids, and their tool names.

An operation is named by its ``operationId``, or, without one, after its
method and path (:func:`fallback_id`); two operations named alike are a
problem. Its tool is ``sanitize_toolname(f"{toolset}_{operationId}")``, with a
hash suffix where distinct ids would give one name (:func:`operation_tool_names`).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from toolbus.domain.calls.naming import MAX_TOOL_NAME, sanitize_toolname
from toolbus.domain.errors import Problem

_NOT_WORD = re.compile(r"[^A-Za-z0-9]+")


def fallback_id(method: str, path: str) -> str:
    """The name of an operation without an operationId: ``get_pets_petId``."""
    return "_".join(part for part in (method, *_NOT_WORD.split(path)) if part)


def operation_tool_names(toolset: str, operation_ids: set[str]) -> dict[str, str]:
    """Each operation's tool name: ``sanitize_toolname(f"{toolset}_{operationId}")``.

    Where distinct operationIds give one name (cut at 64 characters, or made
    alike by sanitizing), each of them gets the first 57 characters and ``_``
    plus 6 hex digits of the SHA-256 of its operationId instead. The names are
    worked out over the whole document, before any filter, so that a tool's
    name never depends on which other operations are served.
    """
    plain = {
        operation_id: sanitize_toolname(f"{toolset}_{operation_id}")
        for operation_id in operation_ids
    }
    owners = Counter(plain.values())
    return {
        operation_id: name
        if owners[name] == 1
        else f"{name[: MAX_TOOL_NAME - 7]}_{hashlib.sha256(operation_id.encode()).hexdigest()[:6]}"
        for operation_id, name in plain.items()
    }


def operation_ids(
    found: list[tuple[str, str, Mapping[str, Any]]], where: str, problems: list[Problem]
) -> dict[tuple[str, str], str]:
    """Each operation's id (its operationId, or the fallback), every collision a problem."""
    names: dict[tuple[str, str], str] = {}
    owners: dict[str, str] = {}
    for path, method, operation in found:
        given = operation.get("operationId")
        name = given if isinstance(given, str) and given else fallback_id(method, path)
        label = f"{method.upper()} {path}"
        if name in owners:
            hint = (
                "operationIds must be unique"
                if isinstance(given, str) and given
                else "it has no operationId and its fallback name is taken; give it one"
            )
            problems.append(
                Problem(where, "", f"{label} and {owners[name]} are both named {name!r}: {hint}")
            )
        else:
            owners[name] = label
        names[(path, method)] = name
    return names
