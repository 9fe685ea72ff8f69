"""The runnable example in docs/adapters/nats.md runs against a real server as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[2] / "docs" / "adapters" / "nats.md"
EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"\n[^\n`]*\n\n```text\n(?P<output>.*?)```",
    re.DOTALL,
)

pytestmark = pytest.mark.broker


def test_the_example_prints_what_the_page_says(nats_url: str, tmp_path: Path) -> None:
    example = EXAMPLE.search(PAGE.read_text(encoding="utf-8"))
    assert example is not None, f"no runnable example found in {PAGE}"
    script = tmp_path / example["name"]
    script.write_text(example["code"])
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "NATS_URL": nats_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == example["output"]
