"""The suite's own rules, run on small test projects of their own in a child pytest.

In CI (``CI=true``) a test whose real part is missing fails naming its install
line, and a skip that ``tests/ci_allowed_skips.txt`` does not list fails the run;
on a developer's machine both stay skips. Hypothesis has no deadline in CI. A
test that hangs fails alone, with its traceback, and the run goes on.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.ci import allowed_skips

REPOSITORY = Path(__file__).resolve().parents[1]

#: The plugins tests/conftest.py loads, for the child run's own conftest.
CONFTEST = """
pytest_plugins = ["tests.support.real_parts", "tests.support.ci"]
"""


def run_pytest(
    tmp_path: Path, tests: str, *, ci: bool, conftest: str = CONFTEST, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """A child pytest over ``tests`` (a module's text) in ``tmp_path``, with or without CI=true."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(conftest))
    (tmp_path / "test_project.py").write_text(textwrap.dedent(tests))
    environment = {k: v for k, v in os.environ.items() if k != "CI"}
    environment["PYTHONPATH"] = str(REPOSITORY)
    # Only the suite's plugins: quicker, and nothing installed can change the outcome.
    environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    if ci:
        environment["CI"] = "true"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


MISSING_PARTS = """
    import pytest

    from tests.support.real_parts import require, requires

    @requires(False, "frobnicator", "apt-get install frobnicator")
    def test_marked():
        pass

    @pytest.fixture
    def frobnicated():
        require(False, "frobnicator", "apt-get install frobnicator")

    def test_through_a_fixture(frobnicated):
        pass

    @requires(True, "frobnicator", "apt-get install frobnicator")
    def test_present():
        pass
"""


def test_in_ci_a_missing_real_part_fails_naming_its_install_line(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, MISSING_PARTS, ci=True)

    assert done.returncode == 1, done.stdout
    assert "1 passed, 2 errors" in done.stdout, done.stdout
    assert done.stdout.count("frobnicator is not installed: apt-get install frobnicator") == 2


def test_locally_a_missing_real_part_skips_naming_its_install_line(tmp_path: Path) -> None:
    done = run_pytest(tmp_path, MISSING_PARTS, ci=False)

    assert done.returncode == 0, done.stdout
    assert "1 passed, 2 skipped" in done.stdout, done.stdout
    assert done.stdout.count("frobnicator is not installed: apt-get install frobnicator") == 2


SKIPPING = """
    import pytest

    def test_skipped():
        pytest.skip("not today")

    @pytest.mark.parametrize("kind", ["plain", "fancy"])
    def test_allowed(kind):
        pytest.skip("cannot here")

    @pytest.mark.xfail(reason="known", strict=True)
    def test_expected_to_fail():
        assert False

    def test_fine():
        pass
"""
ALLOWING = """
    from pathlib import Path

    import pytest

    pytest_plugins = ["tests.support.real_parts", "tests.support.ci"]

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(config):
        import tests.support.ci

        tests.support.ci.ALLOWED_SKIPS = Path(__file__).with_name("allowed.txt")
"""


def test_in_ci_a_skip_not_on_the_allow_list_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "allowed.txt").write_text(
        "# a comment\n\ntest_project.py::test_allowed[*] :: only where it can\n"
    )

    in_ci = run_pytest(tmp_path, SKIPPING, ci=True, conftest=ALLOWING)
    local = run_pytest(tmp_path, SKIPPING, ci=False, conftest=ALLOWING)

    assert in_ci.returncode == 1, in_ci.stdout
    assert "skips CI does not allow" in in_ci.stdout
    said = in_ci.stdout.split("skips CI does not allow")[1].splitlines()
    assert [line for line in said if line.startswith("test_project")] == [
        "test_project.py::test_skipped: not today"
    ]
    # Every skip is listed in the summary (-rs); locally they pass.
    assert "SKIPPED [1] test_project.py:5: not today" in in_ci.stdout
    assert "SKIPPED [2] test_project.py:9: cannot here" in in_ci.stdout
    assert "1 passed, 3 skipped, 1 xfailed" in in_ci.stdout
    assert local.returncode == 0, local.stdout
    assert "skips CI does not allow" not in local.stdout


def test_in_ci_the_allowed_skips_alone_pass(tmp_path: Path) -> None:
    (tmp_path / "allowed.txt").write_text(
        "test_project.py::test_allowed[*] :: only where it can\n"
        "test_project.py::test_skipped :: never today\n"
    )

    done = run_pytest(tmp_path, SKIPPING, ci=True, conftest=ALLOWING)

    assert done.returncode == 0, done.stdout


def test_in_ci_an_allowed_skip_without_its_reason_stops_the_run(tmp_path: Path) -> None:
    (tmp_path / "allowed.txt").write_text("test_project.py::test_skipped\n")

    done = run_pytest(tmp_path, SKIPPING, ci=True, conftest=ALLOWING)

    assert done.returncode == 4, done.stdout + done.stderr
    assert "allowed.txt:1: 'test_project.py::test_skipped' is not 'NODE-ID :: REASON'" in (
        done.stderr
    )


def test_the_allow_list_matches_whole_node_ids_with_stars_only(tmp_path: Path) -> None:
    listed = tmp_path / "allowed.txt"
    listed.write_text("tests/a.py::test_x[persistent] :: why\ntests/b.py::*_listener :: why\n")

    exact, starred = allowed_skips(listed)

    assert exact.pattern.fullmatch("tests/a.py::test_x[persistent]")
    assert not exact.pattern.fullmatch("tests/a.py::test_x[non-persistent]")
    assert not exact.pattern.fullmatch("tests/a.py::test_x[p]")  # brackets are not a class
    assert starred.pattern.fullmatch("tests/b.py::test_closing_a_listener")
    assert not starred.pattern.fullmatch("tests/b.py::test_closing_a_listener_twice")


def test_the_repository_s_allow_list_is_short_and_gives_every_reason() -> None:
    allowed = allowed_skips()

    assert 0 < len(allowed) <= 12
    assert all(len(entry.reason) > 20 for entry in allowed)


def test_an_expected_failure_that_passes_fails_the_run(pytestconfig: pytest.Config) -> None:
    assert pytestconfig.getini("xfail_strict") is True


@pytest.mark.parametrize(("ci", "deadline"), [(True, "None"), (False, "200")])
def test_hypothesis_has_no_deadline_in_ci(tmp_path: Path, ci: bool, deadline: str) -> None:
    tests = """
        from hypothesis import settings

        def test_profile():
            deadline = settings.default.deadline
            print("deadline", None if deadline is None else int(deadline.total_seconds() * 1000))
    """
    done = run_pytest(tmp_path, tests, ci=ci, args=("-s",))

    assert done.returncode == 0, done.stdout
    assert f"deadline {deadline}" in done.stdout


HANGING = """
    import subprocess
    import sys

    import anyio
    import pytest

    pytestmark = pytest.mark.timeout(6)

    @pytest.fixture
    def anyio_backend():
        return "asyncio"

    @pytest.mark.anyio
    async def test_waits_for_ever():
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.sleep_forever)

    def test_a_child_that_never_ends():
        subprocess.run([sys.executable, "-c", "import time; time.sleep(600)"], check=True)

    @pytest.mark.anyio
    async def test_after_them():
        await anyio.sleep(0)
"""


@pytest.mark.slow
def test_a_test_that_hangs_fails_alone_with_where_it_waited(tmp_path: Path) -> None:
    conftest = 'pytest_plugins = ["tests.support.hangs"]\n'
    plugins = ("-p", "anyio.pytest_plugin", "-p", "pytest_timeout")
    options = ("-o", "timeout_method=signal")

    done = run_pytest(tmp_path, HANGING, ci=False, conftest=conftest, args=plugins + options)

    assert "2 failed, 1 passed" in done.stdout, done.stdout
    async_failure, sync_failure = done.stdout.split("____ test_")[1:3]
    # Cancelled in its loop where it waited, a little before its limit.
    assert ">       async with anyio.create_task_group() as tasks:" in async_failure
    assert "TimeoutError" in async_failure
    assert "the test did not end within its time" in async_failure
    # The wait for the child interrupted by the limit's signal.
    assert "os.waitpid" in sync_failure
    assert "Failed: Timeout (>6.0s) from pytest-timeout" in sync_failure
