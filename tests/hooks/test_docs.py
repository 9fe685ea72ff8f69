"""The runnable examples in docs/hooks.md print what the page says they print."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parent.parent.parent / "docs" / "hooks.md"
# The format tests/test_doc_examples.py reads: a file block, one line of prose,
# then the text block it prints.
EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"(?:\n?[^\n`]*\n\n```text\n(?P<output>.*?)```)?",
    re.DOTALL,
)
EXAMPLES = {
    match["name"]: (match["code"], match["output"]) for match in EXAMPLE.finditer(PAGE.read_text())
}


def test_the_page_has_its_examples() -> None:
    assert sorted(EXAMPLES) == ["guard_hooks.py", "memory_hooks.py"]


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_prints_what_the_page_says(tmp_path: Path, name: str) -> None:
    code, output = EXAMPLES[name]
    (tmp_path / name).write_text(code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, name],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == output
