"""The runnable example of docs/openapi.md prints what the page says it prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, Example, assert_runs_as_documented, examples


@pytest.mark.parametrize("example", examples(DOCS / "openapi.md"), ids=lambda e: e.name)
def test_the_example_runs_as_documented(tmp_path: Path, example: Example) -> None:
    assert_runs_as_documented(example, tmp_path)
