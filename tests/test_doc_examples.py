"""Runnable examples in docs/ print what the docs say they print."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, Example, assert_runs_as_documented, examples

PAGES = [
    "tool-services.md",
    "testing.md",
    "hooks.md",
    "architecture.md",
    "security.md",
    "access-control.md",
    "mcp.md",
    "performance.md",
    "configuration.md",
    "audit-and-metrics.md",
    "wire-protocol.md",
    "state-stores.md",
    "asyncapi.md",
    "tasks.md",
    "limits.md",
    "a2a.md",
    "gateway.md",
]


@pytest.mark.parametrize(
    "example",
    [example for page in PAGES for example in examples(DOCS / page)],
    ids=lambda example: f"{example.page}-{example.name}",
)
def test_the_example_runs_as_documented(tmp_path: Path, example: Example) -> None:
    assert_runs_as_documented(example, tmp_path)
