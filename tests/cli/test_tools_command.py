"""``toolbus tools``: what a request with these groups and this state would get."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import typer.core
import typer.main
from typer.testing import CliRunner, Result

import toolbus.cli.tools  # noqa: F401  (registers the command)
from toolbus.cli import app

ROOT = Path(__file__).parent.parent.parent
DATA = ROOT / "tests" / "data"
WORKFLOW = str(DATA / "workflow.json")
DOCS = ROOT / "docs"


def run(*args: str, env: dict[str, str] | None = None) -> Result:
    """Invoke ``toolbus tools ARGS``."""
    # While "tools" is the only command registered, typer runs it as the whole
    # app and a leading "tools" would be an unexpected argument.
    command = ["tools", *args]
    if not isinstance(typer.main.get_command(app), typer.core.TyperGroup):
        command = list(args)
    return CliRunner().invoke(app, command, env=env)


def tool_names(result: Result) -> list[str]:
    return [entry["name"] for entry in json.loads(result.stdout)]


def test_the_table_lists_the_offered_tools() -> None:
    result = run("--config", WORKFLOW, "--group", "read-only", "--group", "knowledge")

    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("2 of 5 tools offered for groups 'read-only', 'knowledge'")
    assert "filtered out 2 by group and 1 by state" in lines[0]
    assert lines[2].split() == [
        "NAME",
        "GROUPS",
        "STATES",
        "NEXT",
        "STATE",
        "SERVICE",
        "DESCRIPTION",
    ]
    assert lines[3].startswith("knowledge-query ")
    assert lines[4].startswith("text-completion ")
    assert len(lines) == 5


def test_without_groups_the_default_group_is_asked_for() -> None:
    result = run("--config", WORKFLOW, "--format", "json")

    assert result.exit_code == 0
    assert json.loads(result.stdout) == []


def test_the_table_says_which_groups_exist_when_nothing_is_offered() -> None:
    result = run("--config", WORKFLOW)

    assert "group 'default' (no --group given)" in result.stdout
    assert "groups in this configuration: admin, advanced, basic" in result.stdout


def test_no_groups_asks_for_an_explicit_empty_list(tmp_path: Path) -> None:
    config = tmp_path / "snap.json"
    tool = {"type": "tool-service", "name": "t", "description": "d", "service": "s"}
    service = {"request-queue": "req", "response-queue": "resp"}
    config.write_text(json.dumps({"tool-service": {"s": service}, "tool": {"t": tool}}))

    absent = run("--config", str(config), "--format", "json")
    empty = run("--config", str(config), "--no-groups", "--format", "json")

    assert tool_names(absent) == ["t"]  # the tool is in "default"
    assert tool_names(empty) == []


def test_no_groups_and_group_cannot_be_combined() -> None:
    result = run("--config", WORKFLOW, "--no-groups", "--group", "admin")

    assert result.exit_code == 2
    assert "do not combine it with --group" in result.stderr


def test_the_wildcard_and_the_state_are_applied() -> None:
    result = run("--config", WORKFLOW, "-g", "*", "-s", "results", "-f", "json")

    assert tool_names(result) == ["text-completion", "reset-workflow"]


def test_the_json_format_describes_each_tool() -> None:
    result = run("--config", WORKFLOW, "--group", "knowledge", "--format", "json")

    entries = json.loads(result.stdout)
    assert [e["name"] for e in entries] == ["knowledge-query"]
    (query,) = entries
    assert query == {
        "key": "knowledge-query",
        "name": "knowledge-query",
        "llm-name": "knowledge-query",
        "type": "tool-service",
        "description": "Query the knowledge graph for entities and relationships",
        "service": "knowledge-service",
        "group": ["read-only", "knowledge", "basic"],
        "state": "analysis",
        "applicable-states": ["undefined", "research"],
        "arguments": [
            {
                "name": "question",
                "type": "string",
                "description": "The question to answer from the graph",
                "required": True,
            }
        ],
    }
    assert "collection" not in result.stdout  # config values may be secrets


def test_a_tool_offered_in_every_state_has_null_applicable_states() -> None:
    result = run("--config", WORKFLOW, "--group", "text", "--format", "json")

    (completion,) = json.loads(result.stdout)
    assert completion["applicable-states"] is None


@pytest.mark.parametrize(
    ("output", "shape"),
    [
        ("openai", {"type", "function"}),
        ("mcp", {"name", "description", "inputSchema", "execution"}),
        ("anthropic", {"name", "description", "input_schema"}),
    ],
)
def test_llm_tool_list_formats(output: str, shape: set[str]) -> None:
    result = run("--config", WORKFLOW, "--group", "basic", "--format", output)

    assert result.exit_code == 0
    exported: list[dict[str, Any]] = json.loads(result.stdout)
    assert len(exported) == 2
    assert all(set(entry) == shape for entry in exported)


def test_a_directory_works_like_a_file() -> None:
    from_dir = run("--config", str(DATA / "workflow"), "-g", "*", "-f", "json")
    from_file = run("--config", WORKFLOW, "-g", "*", "-f", "json")

    assert sorted(tool_names(from_dir)) == sorted(tool_names(from_file))


def test_the_config_can_come_from_the_environment() -> None:
    result = run("-g", "admin", "-s", "analysis", "-f", "json", env={"TOOLBUS_CONFIG": WORKFLOW})

    assert result.exit_code == 0
    assert tool_names(result) == ["graph-update", "reset-workflow"]


def test_a_bad_config_is_reported_readably_with_exit_status_2() -> None:
    result = run("--config", str(DATA / "broken.json"))

    assert result.exit_code == 2
    assert result.stdout == ""
    assert "invalid configuration (7 problems):" in result.stderr
    assert "  - tool 'tell-joke' field 'groups': " in result.stderr
    assert "Traceback" not in result.output


def test_a_missing_config_file_is_reported_with_exit_status_2(tmp_path: Path) -> None:
    result = run("--config", str(tmp_path / "nope.json"))

    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_the_config_option_is_required() -> None:
    result = run("--group", "admin", env={"TOOLBUS_CONFIG": ""})

    assert result.exit_code == 2
    assert "--config" in result.stderr


# --------------------------------------------------------------------------- the docs


def console_examples(page: Path) -> list[tuple[str, str]]:
    """(command line, expected output) for every ``$ toolbus tools`` in a console block."""
    examples = []
    for block in re.findall(r"```console\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        lines = block.splitlines()
        starts = [i for i, line in enumerate(lines) if line.startswith("$ ")]
        for start, end in zip(starts, [*starts[1:], len(lines)], strict=True):
            examples.append((lines[start][2:], "\n".join(lines[start + 1 : end])))
    return examples


DOC_EXAMPLES = [
    pytest.param(page, command, expected, id=f"{page.name}: {command}")
    for page in [DOCS / "groups-and-states.md", DOCS / "configuration.md"]
    for command, expected in console_examples(page)
    if expected  # a command shown without output is an illustration
]


def test_the_docs_have_examples() -> None:
    assert len(DOC_EXAMPLES) >= 8


@pytest.mark.parametrize(("page", "command", "expected"), DOC_EXAMPLES)
def test_the_documented_output_is_what_the_command_prints(
    page: Path, command: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    words = shlex.split(command)
    assert words[:2] == ["toolbus", "tools"], f"{page.name}: only toolbus tools is checked here"
    monkeypatch.chdir(ROOT)  # the examples use paths relative to the repository root

    result = run(*words[2:])

    assert result.output.rstrip("\n") == expected.rstrip("\n")
