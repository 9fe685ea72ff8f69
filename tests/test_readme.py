"""The README is a contract: its tour runs exactly as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.support.uv import uv_executable

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
#: Where the README's install lines put the wheels.
WHEELS = "~/toolbus-wheels"
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
    # The same tests; CI only shuffles their order.
    assert re.search(r"^uv run pytest --random-order$", ci, re.MULTILINE)


def test_the_slow_tests_are_left_out_by_default_and_run_by_ci_and_the_readme_says_how() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    ci = (ROOT / ".ci" / "run").read_text()
    development = README.read_text().split("## Development", 1)[1]

    assert "-m 'not slow'" in options["addopts"]
    assert re.search(r"^uv run pytest -m slow$", ci, re.MULTILINE)
    assert "uv run pytest -m slow" in development


def test_the_layout_lists_every_distribution_of_the_workspace() -> None:
    layout = README.read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    workspace = tomllib.loads((ROOT / "pyproject.toml").read_text())
    members = [
        path.parent
        for pattern in workspace["tool"]["uv"]["workspace"]["members"]
        for path in sorted(ROOT.glob(f"{pattern}/pyproject.toml"))
    ]

    assert len(members) > 10
    for member in members:
        name = tomllib.loads((member / "pyproject.toml").read_text())["project"]["name"]
        assert f"{member.relative_to(ROOT).as_posix()}/" in layout, f"{name} is not in the layout"
        assert f"`{name}`" in layout


def test_the_readme_names_every_extra_of_the_core() -> None:
    core = tomllib.loads((ROOT / "core" / "pyproject.toml").read_text())
    extras = set(core["project"]["optional-dependencies"])
    named = set(re.findall(r"`\[([a-z0-9-]+)\]`", README.read_text().split("Extras:", 1)[1]))

    assert extras - named == set(), "extras the README does not name"
    assert named - extras == set(), "extras the README names and the core does not have"


def test_the_readme_names_every_debian_package_ci_installs() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    packages = set(re.findall(r"missing\+=\(([a-z-]+)\)", ci))
    setup = README.read_text().split("## Set-up", 1)[1].split("\n## ", 1)[0]

    assert {"chromium", "redis-server", "rabbitmq-server"} <= packages
    assert [package for package in sorted(packages) if package not in setup] == []


def install_lines() -> list[str]:
    """The README's two lines that install toolbus into a project outside the checkout."""
    lines = [
        line.split("#", 1)[0].strip()
        for line in README.read_text().splitlines()
        if line.strip().startswith(("uv build --all-packages", "pip install --find-links"))
    ]
    assert [line.split()[0] for line in lines] == ["uv", "pip"], lines
    return lines


@pytest.mark.slow
def test_the_install_lines_work_in_a_fresh_environment_and_the_tour_runs_there(
    tour: Path, tmp_path: Path
) -> None:
    # Exactly the README's lines, the wheel directory put under this test's own.
    build, install = (line.replace(WHEELS, str(tmp_path / "wheels")) for line in install_lines())
    venv = tmp_path / "project-env"
    bin_dir = venv / "bin"

    def step(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
        done = subprocess.run(
            argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=900, check=False
        )
        assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
        return done

    step([uv_executable(), *shlex.split(build)[1:]], cwd=ROOT)
    step([sys.executable, "-m", "venv", str(venv)], cwd=tmp_path)
    step([str(bin_dir / "pip"), *shlex.split(install)[1:]], cwd=tour)
    # The unit test needs the testing extra, installed the same way.
    testing = install.replace("'toolbus[nats]'", "'toolbus[testing]'")
    step([str(bin_dir / "pip"), *shlex.split(testing)[1:]], cwd=tour)

    plugins = step([str(bin_dir / "toolbus"), "plugins", "--json"], cwd=tour)
    assert {p["name"] for p in json.loads(plugins.stdout) if p["kind"] == "adapter"} == {
        "memory",
        "nats",
    }
    called = step([str(bin_dir / "python"), "call_weather.py"], cwd=tour)
    assert called.stdout.splitlines() == ["Boston: 70°F", "Paris: 21°C"]
    tested = step(
        [str(bin_dir / "pytest"), "-q", "-p", "no:cacheprovider", "test_weather.py"], tour
    )
    assert "1 passed" in tested.stdout
    # Without the example services, the tour says which extra brings them.
    demo = subprocess.run(
        [str(bin_dir / "toolbus"), "demo"], cwd=tour, capture_output=True, text=True, timeout=300
    )
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert "'toolbus[examples]'" in demo.stderr and "none installed" not in demo.stderr
