"""The runnable examples in docs/adapters/nats.md run against a real server as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, Example, assert_runs_as_documented, examples

PAGE = DOCS / "adapters" / "nats.md"

pytestmark = pytest.mark.broker


@pytest.mark.parametrize(
    "example", [e for e in examples(PAGE) if e.output is not None], ids=lambda e: e.name
)
def test_the_examples_print_what_the_page_says(
    example: Example, nats_url: str, tmp_path: Path
) -> None:
    assert_runs_as_documented(example, tmp_path, env={"NATS_URL": nats_url}, timeout=60)
