"""Reading policy files: every policy with its file and line, and problems that say where.

Cedar's parser (cedarpy) says *what* is wrong but not *where*. The line is
found by asking the parser again about the beginning of the file: the
shortest beginning that fails other than by ending too early ends at the line
of the mistake, and the number of policies in each beginning tells which line
each policy starts on. Files are small and read once per change, so the few
extra parses cost nothing that matters.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cedarpy

#: What Cedar says of text that stops in the middle of a policy.
_UNFINISHED = "unexpected end of input"


@dataclass(frozen=True, slots=True)
class Located:
    """One policy: where it is written, and its annotations."""

    file: Path
    line: int
    annotations: dict[str, str | None] = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The policy's ``@id``, else its file and line."""
        given = self.annotations.get("id")
        return given if given else f"{self.file.name}:{self.line}"


@dataclass(frozen=True, slots=True)
class Problem:
    """What is wrong, where (file and line), and how to fix it."""

    file: Path
    line: int | None
    message: str

    @property
    def where(self) -> str:
        return f"policy file {self.file}" + (f", line {self.line}" if self.line else "")


@dataclass(frozen=True, slots=True)
class PolicyText:
    """Every policy file's text, joined in order, and each policy by its Cedar id."""

    text: str
    #: Cedar's positional id (``policy0``, ...) -> where that policy is written.
    policies: dict[str, Located]
    #: The policies as Cedar's JSON form (for what they refer to).
    json: dict[str, Any]


def read(files: Sequence[Path]) -> PolicyText | list[Problem]:
    """The policies in ``files``, or every problem found in them."""
    problems: list[Problem] = []
    texts: list[str] = []
    located: list[Located] = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(Problem(path, None, f"cannot be read: {exc}"))
            continue
        found = _one_file(path, text)
        if isinstance(found, Problem):
            problems.append(found)
            continue
        texts.append(text)
        located += found
    if problems:
        return problems
    joined = "\n".join(texts)
    est = json.loads(cedarpy.policies_to_json_str(joined)) if joined.strip() else {}
    static: dict[str, Any] = est.get("staticPolicies", {})
    policies = {}
    for index, where in enumerate(located):
        policy_id = f"policy{index}"
        annotations = static.get(policy_id, {}).get("annotations", {})
        policies[policy_id] = Located(where.file, where.line, dict(annotations))
    return PolicyText(joined, policies, static)


def _one_file(path: Path, text: str) -> list[Located] | Problem:
    lines = text.splitlines()
    try:
        parsed = cedarpy.PolicySet.from_str(text)
    except ValueError as exc:
        line = _failing_line(lines)
        return Problem(path, line, f"{exc}; {_SYNTAX_FIX}")
    if parsed.templates():
        return Problem(
            path,
            None,
            "holds a template (a policy with ?principal or ?resource); write each policy "
            "for the principals and tools it is about",
        )
    ends = _policy_ends(lines, len(parsed))
    starts = []
    previous = 0
    for end in ends:
        starts.append(_first_code_line(lines, previous))
        previous = end
    return [Located(path, start) for start in starts]


_SYNTAX_FIX = (
    "each policy is permit(...) or forbid(...), may have when { ... } or unless { ... }, "
    "and ends with ';' (docs/access-control.md shows examples)"
)


def _parses(text: str) -> tuple[int | None, str | None]:
    """(policies, None) when ``text`` parses, else (None, what the parser said)."""
    try:
        return len(cedarpy.PolicySet.from_str(text)), None
    except ValueError as exc:
        return None, str(exc)


def _failing_line(lines: list[str]) -> int:
    """The first line by which the text is wrong other than by stopping early (1-based)."""
    low, high = 1, len(lines)
    while low < high:
        middle = (low + high) // 2
        count, error = _parses("\n".join(lines[:middle]))
        if count is None and error is not None and _UNFINISHED not in error:
            high = middle
        else:
            low = middle + 1
    return low


def _policy_ends(lines: list[str], policies: int) -> list[int]:
    """The line each policy ends on (1-based), for a text that parses as ``policies``.

    A policy ends with ``;``: only the beginnings that end on a line holding one
    are parsed. (A search by halving would need "the first N lines hold at least
    k policies" to stay true once true, and it does not: a beginning that stops
    inside the next policy's annotations does not parse at all.)
    """
    ends: list[int] = []
    for number, line in enumerate(lines, start=1):
        if ";" not in line:
            continue
        count, _ = _parses("\n".join(lines[:number]))
        while count is not None and len(ends) < min(count, policies):
            ends.append(number)
        if len(ends) == policies:
            break
    return ends + [len(lines)] * (policies - len(ends))


def _first_code_line(lines: list[str], after: int) -> int:
    """The first line after line ``after`` that holds more than space or a comment."""
    for number in range(after, len(lines)):
        stripped = lines[number].strip()
        if stripped and not stripped.startswith("//"):
            return number + 1
    return after + 1
