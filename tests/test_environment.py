"""What every ``uv run`` installs: what the demo and the quick suite need, and no more.

``uv run`` (``uv run toolbus demo`` included) syncs the project's dependencies and
the default dependency group, whatever the command. Heavier tools live in groups of
their own, named by the commands that need them (``uv run --group browser pytest
tests/gateway``); ``.ci/run`` installs every group, and a test needing a group that is
missing skips, naming that command.
"""

from __future__ import annotations

import ast
import os
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement

from tests.support.groups import PROVIDES, run_with
from tests.support.uv import uv_executable

ROOT = Path(__file__).parent.parent
TESTS = ROOT / "tests"
#: Groups outside the default environment: each of their packages, and the only files
#: that may import it (none: the group's command is run, not imported).
BY_HAND = {
    "browser": {
        "playwright": {
            TESTS / "gateway" / "conftest.py",
            TESTS / "gateway" / "test_console.py",
            TESTS / "gateway" / "test_approvals.py",
        }
    },
    "fuzz": {"schemathesis": set()},
    "typing": {"mypy": set()},
    "bench": {"faststream": {TESTS / "benchmarks" / "side_by_side.py"}, "py-spy": set()},
    "charts": {"matplotlib": {TESTS / "benchmarks" / "charts.py"}},
}


def workspace() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def group(name: str) -> set[str]:
    return {Requirement(entry).name for entry in workspace()["dependency-groups"][name]}


def default_groups() -> list[str]:
    groups: list[str] = workspace()["tool"]["uv"].get("default-groups", ["dev"])
    return groups


def test_the_heavy_tools_are_out_of_the_default_environment() -> None:
    default = set().union(*(group(name) for name in default_groups()))

    assert set(workspace()["dependency-groups"]) - set(default_groups()) == set(BY_HAND)
    for name, packages in BY_HAND.items():
        assert set(packages) <= group(name)
        assert not set(packages) & default, f"{name}'s packages are in the default environment"


def test_ci_installs_every_group_the_tests_and_checks_use() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    (synced,) = [line for line in ci.splitlines() if line.startswith("uv sync --locked")]

    for name in {*PROVIDES, "typing"}:
        assert f" --group {name} " in f"{synced} ", name


def imported(path: Path, *, at_import_only: bool = False) -> set[str]:
    """The top-level packages ``path`` imports; with ``at_import_only``, those imported
    when the module is (not inside a function, nor under ``if TYPE_CHECKING``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = list(ast.walk(tree)) if not at_import_only else list(_run_at_import(tree.body))
    names = {alias.name for node in nodes if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in nodes if isinstance(node, ast.ImportFrom) and node.module}
    return {name.split(".")[0] for name in names}


def _run_at_import(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """The statements a module runs when imported: not function bodies, nor what only
    type checkers see."""
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from _run_at_import(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "finalbody", "handlers"):
            inner = getattr(node, field, None)
            if isinstance(inner, list):
                yield from _run_at_import([n for n in inner if isinstance(n, ast.stmt)])
        for handler in getattr(node, "handlers", []) or []:
            yield from _run_at_import(handler.body)


def sources() -> list[Path]:
    return [
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("*/*/src/**/*.py"),
        *ROOT.glob("core/src/**/*.py"),
    ]


def test_only_the_files_of_a_group_import_its_packages() -> None:
    for packages in BY_HAND.values():
        for package, allowed in packages.items():
            users = {path for path in sources() if package in imported(path)}
            assert users <= allowed, f"{sorted(users - allowed)} import {package}"


def test_no_test_module_needs_a_group_to_be_collected() -> None:
    """A group's package is imported in a fixture or under TYPE_CHECKING, never when
    pytest collects the module: without the group, its tests skip rather than error."""
    heavy = {package for packages in BY_HAND.values() for package in packages}
    collected = [
        *TESTS.rglob("test_*.py"),
        *TESTS.rglob("conftest.py"),
        *TESTS.glob("support/*.py"),
    ]
    found = {
        path.relative_to(ROOT).as_posix(): sorted(imported(path, at_import_only=True) & heavy)
        for path in collected
    }
    assert {path: names for path, names in found.items() if names} == {}


@pytest.mark.slow
def test_the_default_environment_runs_the_demo_and_skips_what_needs_a_group(
    tmp_path: Path,
) -> None:
    """A fresh ``uv sync`` (no group but the default): the demo runs; a browser test and
    the fuzzing test skip, each saying the command that runs it."""
    # A developer's machine: outside CI, where a missing group fails instead of skipping.
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "CI")}
    env["UV_PROJECT_ENVIRONMENT"] = str(tmp_path / "default-env")
    synced = subprocess.run(
        [uv_executable(), "sync", "--locked"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert synced.returncode == 0, synced.stderr
    python = tmp_path / "default-env" / "bin" / "python"
    missing = subprocess.run(
        [str(python), "-c", "import playwright"], capture_output=True, check=False
    )
    assert missing.returncode != 0, "the browser group is in the default environment"

    demo = subprocess.run(
        [str(python), "-m", "toolbus", "demo"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr

    gated = ["tests/gateway/test_console.py", "tests/gateway/test_openapi_contract.py"]
    ran = subprocess.run(
        [str(python), "-m", "pytest", "-m", "", "-rs", "-q", "-p", "no:cacheprovider", *gated],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "passed" not in ran.stdout.splitlines()[-1], ran.stdout  # every one skipped
    for name in ("browser", "fuzz"):
        assert f"--group {name} pytest" in ran.stdout, ran.stdout
    assert run_with("browser", "tests/gateway") in ran.stdout
    assert set(PROVIDES) == {"browser", "fuzz"}  # the groups tests ask for, all tried here
