"""The runnable examples in docs/tool-call-context.md print what the page says they print.

They run one after another in one fresh interpreter (importing toolbus once,
not once per example), each as ``__main__`` with its own stdout. The one that
installs an OpenTelemetry SDK runs first, so that the others run with spans
recorded too (their output must not change) and none ran before it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.doc_examples import DOCS, examples

PAGE = DOCS / "tool-call-context.md"
EXAMPLES = {example.name: example for example in examples(PAGE)}
FIRST = "spans.py"
RUNNER = """
import contextlib, io, json, runpy, sys
printed = {}
for name in sys.argv[1:]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(name, run_name="__main__")
    printed[name] = out.getvalue()
print(json.dumps(printed))
"""


@pytest.fixture(scope="module")
def printed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    where = tmp_path_factory.mktemp("examples")
    for name, example in EXAMPLES.items():
        (where / name).write_text(example.code)
    order = sorted(EXAMPLES, key=lambda name: (name != FIRST, name))
    result = subprocess.run(
        [sys.executable, "-c", RUNNER, *order],
        cwd=where,
        env={**os.environ, "PYTHONPATH": str(where)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    output: dict[str, str] = json.loads(result.stdout)
    return output


def test_every_example_is_found() -> None:
    assert len(EXAMPLES) == PAGE.read_text().count("<!-- file: ") == 7
    assert FIRST in EXAMPLES


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_the_example_prints_what_the_page_says(printed: dict[str, str], name: str) -> None:
    assert printed[name] == EXAMPLES[name].output
