"""Runnable examples in docs/ print what the docs say they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).parent.parent / "docs"
# A file block, then (optionally, after a line of prose) the text block it prints.
EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"(?:\n?[^\n`]*\n\n```text\n(?P<output>.*?)```)?",
    re.DOTALL,
)
PAGES = ["tool-services.md", "testing.md", "hooks.md"]


def examples() -> list[tuple[str, str, str, str | None]]:
    found = []
    for page in PAGES:
        for match in EXAMPLE.finditer((DOCS / page).read_text()):
            found.append((page, match["name"], match["code"], match["output"]))
    return found


@pytest.mark.parametrize(("page", "name", "code", "output"), examples())
def test_the_example_runs_as_documented(
    tmp_path: Path, page: str, name: str, code: str, output: str | None
) -> None:
    (tmp_path / name).write_text(code)
    if name.startswith("test_"):
        argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", name]
    else:
        argv = [sys.executable, name]
    result = subprocess.run(
        argv,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{page}: {name}\n{result.stdout}\n{result.stderr}"
    if output is not None:
        assert result.stdout == output
