"""What a CI run (``CI=true``) asks of the suite beyond passing: no unexplained skip, no clock.

* Every skip is recorded. CI fails the run on a skip that ``tests/ci_allowed_skips.txt``
  does not list with its reason (the tests that skip because the machine lacks a real
  part fail in CI already: :mod:`tests.support.real_parts`).
* Hypothesis runs under the ``ci`` profile: no deadline, since a loaded CI machine
  makes any per-example time limit a coin toss. Locally the default profile keeps
  its deadline, which points at an example that became slow.

Loaded by ``tests/conftest.py`` as a plugin.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from tests.support.real_parts import in_ci

#: The skips CI accepts, one a line: a test's node id (``*`` matches anything), " :: ",
#: and why skipping it is right.
ALLOWED_SKIPS = Path(__file__).parents[1] / "ci_allowed_skips.txt"
SEPARATOR = " :: "

settings.register_profile("ci", deadline=None, print_blob=True)
if in_ci():
    settings.load_profile("ci")


@dataclass(frozen=True)
class AllowedSkip:
    pattern: re.Pattern[str]
    reason: str


def allowed_skips(path: Path | None = None) -> list[AllowedSkip]:
    """The allow-list (:data:`ALLOWED_SKIPS`), read strictly: a line without its reason is a
    mistake in the file."""
    path = path or ALLOWED_SKIPS
    found = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        test, separator, reason = line.partition(SEPARATOR)
        if not separator or not test.strip() or not reason.strip():
            raise ValueError(
                f"{path.name}:{number}: {line!r} is not 'NODE-ID{SEPARATOR}REASON'; "
                "give every allowed skip its reason"
            )
        pattern = ".*".join(re.escape(part) for part in test.strip().split("*"))
        found.append(AllowedSkip(re.compile(pattern), reason.strip()))
    return found


class SkipRecorder:
    """Collects the run's skips and, in CI, fails the run on those not allowed."""

    def __init__(self, allowed: list[AllowedSkip], listed_in: str) -> None:
        self.allowed = allowed
        self.listed_in = listed_in
        self.skipped: list[tuple[str, str]] = []
        self.unexpected: list[tuple[str, str]] = []

    @pytest.hookimpl
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.skipped:
            self.skipped.append((report.nodeid, _reason(report)))

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        # An expected failure reports as skipped too; xfail_strict keeps those honest.
        if report.skipped and not hasattr(report, "wasxfail"):
            self.skipped.append((report.nodeid, _reason(report)))

    @pytest.hookimpl
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        self.unexpected = [
            (test, reason)
            for test, reason in self.skipped
            if not any(entry.pattern.fullmatch(test) for entry in self.allowed)
        ]
        if self.unexpected and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.unexpected:
            return
        terminalreporter.section("skips CI does not allow", red=True, bold=True)
        for test, reason in self.unexpected:
            terminalreporter.line(f"{test}: {reason}")
        terminalreporter.line(
            f"CI fails on a skip that {self.listed_in} does not list: make the test run, "
            "or list it there with the reason skipping it is right"
        )


def _reason(report: pytest.CollectReport | pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_configure(config: pytest.Config) -> None:
    if in_ci():
        try:
            allowed = allowed_skips()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        listed_in = os.path.relpath(ALLOWED_SKIPS, config.rootpath)
        config.pluginmanager.register(SkipRecorder(allowed, listed_in), "toolbus-ci-skips")
