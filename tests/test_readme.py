"""The README is a contract: its tour runs exactly as written."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).parent.parent / "README.md"
FILE_BLOCK = re.compile(r"<!-- file: (?P<name>\S+) -->\n```\w*\n(?P<body>.*?)```", re.DOTALL)


@pytest.fixture(scope="module")
def tour(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's files, written out into a fresh directory."""
    directory = tmp_path_factory.mktemp("tour")
    blocks = FILE_BLOCK.findall(README.read_text())
    assert {name for name, _ in blocks} >= {
        "weather.py",
        "config.json",
        "call_weather.py",
        "test_weather.py",
    }
    for name, body in blocks:
        (directory / name).write_text(body)
    return directory


def run(directory: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(directory)}
    return subprocess.run(
        argv, cwd=directory, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def test_the_call_example_prints_what_the_readme_says(tour: Path) -> None:
    result = run(tour, sys.executable, "call_weather.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["Boston: 70°F", "Paris: 21°C"]


def test_the_unit_test_example_passes(tour: Path) -> None:
    result = run(
        tour, sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_weather.py"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.parametrize(
    ("flags", "offered"),
    [((), ["weather-eu"]), (("--group", "travel"), ["weather-us"])],
)
def test_the_tools_commands_show_what_the_readme_says(
    tour: Path, flags: tuple[str, ...], offered: list[str]
) -> None:
    toolbus = Path(sys.executable).parent / "toolbus"
    result = run(tour, str(toolbus), "tools", "--config", "config.json", "--format", "json", *flags)
    assert result.returncode == 0, result.stderr
    assert [tool["name"] for tool in json.loads(result.stdout)] == offered


def test_ci_runs_exactly_the_readme_test_command() -> None:
    ci = (README.parent / ".ci" / "run").read_text()
    assert "uv run pytest" in README.read_text()
    assert re.search(r"^uv run pytest$", ci, re.MULTILINE)
