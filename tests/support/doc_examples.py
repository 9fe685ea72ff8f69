"""Runnable examples in the docs: find them in a page, run them as a reader would.

An example is a ``<!-- file: NAME -->`` marker, a fenced python block, and
optionally, after one line of prose, the ``text`` block it prints.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"
_EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"(?:\n?[^\n]*\n\n```text\n(?P<output>.*?)```)?",
    re.DOTALL,
)


@dataclass(frozen=True)
class Example:
    page: str
    name: str
    code: str
    output: str | None  # what the page says it prints, when it says


def examples(page: Path) -> list[Example]:
    """Every runnable example on ``page``, in page order."""
    text = page.read_text(encoding="utf-8")
    return [Example(page.name, m["name"], m["code"], m["output"]) for m in _EXAMPLE.finditer(text)]


def assert_runs_as_documented(
    example: Example,
    directory: Path,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> None:
    """Write the example to ``directory``, run it (with pytest when it is a test
    module), and check it succeeds and prints exactly what the page says."""
    (directory / example.name).write_text(example.code, encoding="utf-8")
    if example.name.startswith("test_"):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", example.name]
    else:
        argv = [sys.executable, example.name]
    result = subprocess.run(
        argv,
        cwd=directory,
        env={**os.environ, "PYTHONPATH": str(directory), **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    where = f"{example.page}: {example.name}"
    assert result.returncode == 0, f"{where}\n{result.stdout}\n{result.stderr}"
    if example.output is not None:
        assert result.stdout == example.output, where
