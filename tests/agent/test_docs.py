"""docs/agent.md's examples run as documented; the local-model one against the scripted server."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.doc_examples import DOCS, Example, assert_runs_as_documented, examples
from tests.support.model_server import ModelServer

EXAMPLES = examples(DOCS / "agent.md")


def test_the_page_has_its_examples() -> None:
    assert [e.name for e in EXAMPLES] == [
        "agent_quickstart.py",
        "suspended_run.py",
        "local_model.py",
        "my_model.py",
    ]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda example: example.name)
def test_the_example_runs_as_documented(
    tmp_path: Path, model_server: ModelServer, example: Example
) -> None:
    model_server.play(
        [
            {"calls": [{"name": "weather", "arguments": {"city": "Oslo"}}]},
            {"text": "Yes: 18 °C and light rain in Oslo."},
        ]
    )
    if example.name == "local_model.py":
        example = Example(
            example.page, example.name, example.code, "Yes: 18 °C and light rain in Oslo.\n"
        )
    env = {"TOOLBUS_LLM": model_server.openai_url()}
    assert_runs_as_documented(example, tmp_path, env=env)
    if example.name == "local_model.py":
        assert [tools for tools in model_server.script.offered()] == [["weather"], ["weather"]]
