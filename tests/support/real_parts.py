"""Real parts a test needs from the machine (a browser, a server from Debian, Node's packages).

Where one is missing, the test skips on a developer's machine, naming the line that
installs it; in CI (``CI=true``) it fails with that line instead, so that a run
cannot go green with a whole family of tests left out. Use :func:`require` inside
a fixture or a test, and :func:`requires` as a mark on a test or a module.

Loaded by ``tests/conftest.py`` as a plugin, which checks the marks.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import NoReturn

import pytest

#: The mark :func:`requires` puts on a test, checked before the test is set up.
MARK = "real_part"
#: Where the npm packages some tests drive are installed (``npm ci`` there).
NODE_PACKAGES = Path(__file__).resolve().parents[1] / "node"


def in_ci() -> bool:
    """Whether this run is CI's (``CI=true``, as CI services and ``.ci/run`` set it)."""
    return os.environ.get("CI", "").strip().lower() in {"true", "1", "yes"}


def missing(what: str, install: str) -> NoReturn:
    """Skip the running test (locally) or fail it (in CI): ``what`` is not installed."""
    message = f"{what} is not installed: {install}"
    if in_ci():
        pytest.fail(f"{message} (CI runs every test: .ci/run installs it)", pytrace=False)
    pytest.skip(message)


def require(present: bool, what: str, install: str) -> None:
    """Go on when ``present``; else :func:`missing`."""
    if not present:
        missing(what, install)


def requires(present: bool, what: str, install: str) -> pytest.MarkDecorator:
    """:func:`require` as a mark, checked when each marked test is set up."""
    return getattr(pytest.mark, MARK)(present, what, install)


def requires_node_package(package: str, what: str) -> pytest.MarkDecorator:
    """:func:`requires` Node.js and ``package`` from ``tests/node``."""
    return requires(
        shutil.which("node") is not None and (NODE_PACKAGES / "node_modules" / package).is_dir(),
        what,
        "apt-get install nodejs npm, then (cd tests/node && npm ci)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{MARK}(present, what, install): needs a real part (tests.support.real_parts)"
    )


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    for mark in item.iter_markers(MARK):
        require(*mark.args)
