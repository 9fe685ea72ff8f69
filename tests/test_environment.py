"""What every ``uv run`` installs: everything ``uv run pytest`` needs, and not what no test uses.

``uv run`` (``uv run toolbus demo`` included) syncs the project's dependencies and
the default dependency groups, whatever the command. Tools that only a script run
by hand needs live in a group of their own, named where the script is documented.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement

ROOT = Path(__file__).parent.parent
#: Groups outside the default environment, and the only files that may import them.
BY_HAND = {"charts": {"matplotlib": {ROOT / "tests" / "benchmarks" / "charts.py"}}}


def workspace() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def group(name: str) -> set[str]:
    return {Requirement(entry).name for entry in workspace()["dependency-groups"][name]}


def test_what_only_scripts_run_by_hand_use_is_out_of_the_default_environment() -> None:
    default_groups = workspace()["tool"]["uv"].get("default-groups", ["dev"])
    default = set().union(*(group(name) for name in default_groups))

    for name, packages in BY_HAND.items():
        assert set(packages) <= group(name)
        assert not set(packages) & default, f"{name}'s packages are in the default environment"


def imported(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    return {name.split(".")[0] for name in names}


def test_only_the_scripts_of_a_group_import_its_packages() -> None:
    sources = [
        *ROOT.glob("tests/**/*.py"),
        *ROOT.glob("*/*/src/**/*.py"),
        *ROOT.glob("core/src/**/*.py"),
    ]
    for packages in BY_HAND.values():
        for package, allowed in packages.items():
            users = {path for path in sources if package in imported(path)}
            assert users <= allowed, f"{sorted(users - allowed)} import {package}"
