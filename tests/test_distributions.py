"""Every distribution of the repository names the versions of the others it works with.

Adapters and plugins accept the core's current release series only
(``toolbus>=X.Y,<X.Y+1``), and the core's extras take the matching series of
each first-party distribution, so that mixing a checkout with released
packages fails at install time rather than at import time.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).parent.parent
CORE = ROOT / "core" / "pyproject.toml"
MEMBERS = sorted(
    path
    for pattern in (
        "adapters/*/pyproject.toml",
        "plugins/*/pyproject.toml",
        "bridges/*/pyproject.toml",
    )
    for path in ROOT.glob(pattern)
)


def project(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = tomllib.loads(path.read_text(encoding="utf-8"))["project"]
    return data


def series(version: str) -> str:
    """``0.1.3`` -> ``>=0.1,<0.2``; ``1.4.0`` -> ``>=1.4,<1.5``: the same minor series."""
    major, minor = Version(version).release[:2]
    return f"<{major}.{minor + 1},>={major}.{minor}"


def test_there_are_distributions_to_check() -> None:
    assert len(MEMBERS) >= 5


@pytest.mark.parametrize("path", MEMBERS, ids=lambda p: p.parent.name)
def test_each_distribution_takes_the_cores_series(path: Path) -> None:
    core_version = project(CORE)["version"]
    requirements = [Requirement(r) for r in project(path)["dependencies"]]
    [core] = [r for r in requirements if r.name == "toolbus"]

    assert str(core.specifier) == series(core_version)
    assert core.specifier.contains(core_version)


def test_the_cores_extras_take_the_series_of_each_first_party_distribution() -> None:
    versions = {project(p)["name"]: project(p)["version"] for p in MEMBERS}
    extras: dict[str, list[str]] = project(CORE)["optional-dependencies"]
    first_party = [
        Requirement(r)
        for requirements in extras.values()
        for r in requirements
        if re.match(r"toolbus-", r)
    ]

    assert first_party
    for requirement in first_party:
        assert requirement.name in versions, requirement
        assert str(requirement.specifier) == series(versions[requirement.name]), requirement
