"""The runnable example in docs/adapters/nats.md runs against a real server as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples

PAGE = DOCS / "adapters" / "nats.md"

pytestmark = pytest.mark.broker


def test_the_example_prints_what_the_page_says(nats_url: str, tmp_path: Path) -> None:
    (example,) = [e for e in examples(PAGE) if e.output is not None]
    assert_runs_as_documented(example, tmp_path, env={"NATS_URL": nats_url}, timeout=60)
