"""The runnable example in docs/adapters/kafka.md prints what the page says, on a real broker."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[2] / "docs" / "adapters" / "kafka.md"
# The example's file block, a line of prose, then the text block it prints.
EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"\n[^\n`]*\n\n```text\n(?P<output>.*?)```",
    re.DOTALL,
)

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_the_example_prints_what_the_page_says(kafka_url: str, tmp_path: Path) -> None:
    example = EXAMPLE.search(PAGE.read_text(encoding="utf-8"))
    assert example is not None, f"no runnable example found in {PAGE}"
    script = tmp_path / example["name"]
    script.write_text(example["code"], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "KAFKA_URL": kafka_url},
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == example["output"]
