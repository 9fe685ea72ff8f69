"""The runnable example in docs/adapters/kafka.md prints what the page says, on a real broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples

PAGE = DOCS / "adapters" / "kafka.md"

pytestmark = [pytest.mark.broker, pytest.mark.slow]


def test_the_example_prints_what_the_page_says(kafka_url: str, tmp_path: Path) -> None:
    (example,) = [e for e in examples(PAGE) if e.output is not None]
    assert_runs_as_documented(example, tmp_path, env={"KAFKA_URL": kafka_url}, timeout=90)
