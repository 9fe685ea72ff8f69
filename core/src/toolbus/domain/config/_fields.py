"""Reading a descriptor's fields, collecting every problem instead of stopping at the first.

Validation reports all the problems of a snapshot at once (docs/configuration.md),
so each reader here notes what is wrong in a :class:`Problems` and carries on
with a harmless value.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from toolbus.domain.config.parsing import describe
from toolbus.domain.errors import Problem


class Problems:
    """Collects problems so that validation reports all of them at once."""

    def __init__(self) -> None:
        self.items: list[Problem] = []

    def add(self, where: str, field_name: str, message: str) -> None:
        self.items.append(Problem(where, field_name, message))

    def __len__(self) -> int:
        return len(self.items)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``"did you mean 'x'?"`` for the closest choice, or ``""``."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean {close[0]!r}?" if close else ""


def string_list(value: Any, where: str, field_name: str, problems: Problems) -> tuple[str, ...]:
    if isinstance(value, list) and all(isinstance(item, str) for item in value):
        return tuple(value)
    hint = f"; write [{json.dumps(value)}]" if isinstance(value, str) else ""
    problems.add(
        where,
        field_name,
        f'must be a list of strings like ["a", "b"], not {describe(value)}{hint}',
    )
    return ()


def required_text(raw: Mapping[str, Any], name: str, where: str, problems: Problems) -> str:
    value = raw.get(name)
    if value is None:
        problems.add(where, name, "is required")
        return ""
    if not isinstance(value, str) or not value.strip():
        problems.add(where, name, f"must be a non-empty string, not {describe(value)}")
        return ""
    return value
