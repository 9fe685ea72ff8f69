"""The conformance suite needs pytest, which only the ``toolbus[testing]`` extra brings."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_without_pytest_the_suite_says_which_extra_to_install() -> None:
    # A real interpreter in which pytest cannot be imported, as after `pip install toolbus`.
    script = textwrap.dedent(
        """
        import sys
        sys.modules["pytest"] = None
        try:
            import toolbus.testing.conformance
        except ImportError as exc:
            print(exc)
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )

    assert "pip install 'toolbus[testing]'" in result.stdout


def test_the_core_itself_imports_without_pytest() -> None:
    script = "import sys; sys.modules['pytest'] = None; import toolbus, toolbus.testing"
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
