"""docs/adapters/rabbitmq.md: its example runs on a real node; its options table is complete."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, assert_runs_as_documented, examples
from toolbus_rabbitmq import RabbitMQOptions

PAGE = DOCS / "adapters" / "rabbitmq.md"


@pytest.mark.broker
@pytest.mark.slow
def test_the_example_prints_what_the_page_says(rabbitmq_url: str, tmp_path: Path) -> None:
    (example,) = [e for e in examples(PAGE) if e.output is not None]
    assert_runs_as_documented(example, tmp_path, env={"RABBITMQ_URL": rabbitmq_url}, timeout=90)


def test_the_options_table_lists_every_option() -> None:
    text = PAGE.read_text(encoding="utf-8")
    table = text.split("### Options", 1)[1].split("\n\n", 2)[1]
    documented = {
        name for row in table.splitlines()[2:] for name in re.findall(r"`(\w+)`", row.split("|")[1])
    }
    assert documented == set(RabbitMQOptions.model_fields)
