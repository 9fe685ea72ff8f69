"""The runnable example in docs/adapters/pulsar.md runs against a real server as documented."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples

PAGE = DOCS / "adapters" / "pulsar.md"

pytestmark = pytest.mark.broker


def test_the_example_prints_what_the_page_says(pulsar_url: str, tmp_path: Path) -> None:
    (example,) = [e for e in examples(PAGE) if e.output is not None]
    assert_runs_as_documented(example, tmp_path, env={"PULSAR_URL": pulsar_url}, timeout=60)


def test_the_page_says_what_the_tests_run_against() -> None:
    text = PAGE.read_text(encoding="utf-8")
    assert "Pulsar-protocol-compatible server, **not Apache Pulsar itself**" in text


def test_every_option_is_documented() -> None:
    from toolbus_pulsar import PulsarOptions

    text = PAGE.read_text(encoding="utf-8")
    missing = [name for name in PulsarOptions.model_fields if f"`{name}`" not in text]
    assert not missing, f"options missing from {PAGE.name}: {missing}"
