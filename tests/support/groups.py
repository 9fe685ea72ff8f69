"""Tests that need a dependency group outside the default environment.

``uv run pytest`` installs the workspace and the ``dev`` group only; the heavier
tools are groups of their own (pyproject.toml: ``browser``, ``fuzz``, ``typing``,
``bench``, ``charts``), which ``.ci/run`` installs. A test that needs one skips
where it is missing, saying the command that runs it with the group; in CI, which
installs them, it fails (:mod:`tests.support.real_parts`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.support.real_parts import requires

#: Each group a test may need, and what shows that it is installed: a module to
#: import, or (``bin:``) a command in the environment's ``bin`` folder.
PROVIDES = {
    "browser": "playwright",
    "fuzz": "bin:schemathesis",
}


def group_installed(group: str) -> bool:
    """Whether ``group``'s packages are in this environment."""
    provided = PROVIDES[group]
    if provided.startswith("bin:"):  # this environment's own, as the tests run it
        return (Path(sys.executable).parent / provided.removeprefix("bin:")).exists()
    return importlib.util.find_spec(provided) is not None


def run_with(group: str, where: str) -> str:
    """The command that runs the tests at ``where`` with ``group`` installed."""
    return f"uv run --group {group} pytest {where}"


def needs_group(group: str, where: str) -> pytest.MarkDecorator:
    """Skip (fail in CI) unless ``group`` is installed; the reason names the command for
    ``where``."""
    return requires(group_installed(group), f"the {group} dependency group", run_with(group, where))
