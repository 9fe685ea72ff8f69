"""The runnable example in docs/adapters/pulsar.md runs against a real server as documented."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PAGE = Path(__file__).parents[2] / "docs" / "adapters" / "pulsar.md"
EXAMPLE = re.compile(
    r"<!-- file: (?P<name>\S+) -->\n```python\n(?P<code>.*?)```\n"
    r"\n[^\n]*\n\n```text\n(?P<output>.*?)```",
    re.DOTALL,
)

pytestmark = pytest.mark.broker


def test_the_example_prints_what_the_page_says(pulsar_url: str, tmp_path: Path) -> None:
    example = EXAMPLE.search(PAGE.read_text(encoding="utf-8"))
    assert example is not None, f"no runnable example found in {PAGE}"
    script = tmp_path / example["name"]
    script.write_text(example["code"])
    result = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env={**os.environ, "PULSAR_URL": pulsar_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == example["output"]


def test_the_page_says_what_the_tests_run_against() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "Pulsar-protocol-compatible server, **not Apache Pulsar itself**" in text


def test_every_option_is_documented() -> None:
    from toolbus_pulsar.options import OPTION_NAMES

    text = PAGE.read_text(encoding="utf-8")
    missing = [name for name in OPTION_NAMES if f"`{name}`" not in text]
    assert not missing, f"options missing from {PAGE.name}: {missing}"
