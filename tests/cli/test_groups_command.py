"""``toolbus groups``: every group with its tools, their states and transitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import toolbus.cli.groups
import toolbus.cli.tools  # noqa: F401  (with one command typer would drop the command name)
from toolbus.cli import app

SECRET = "collection-with-s3cret-token"


def tool(name: str, groups: list[str], state: str | None, states: list[str] | None) -> Any:
    descriptor: dict[str, Any] = {
        "type": "tool-service",
        "name": name,
        "description": f"The {name} tool",
        "service": "spec-service",
        "collection": SECRET,
        "group": groups,
    }
    if state is not None:
        descriptor["state"] = state
    if states is not None:
        descriptor["applicable-states"] = states
    return descriptor


@pytest.fixture
def config(tmp_path: Path) -> Path:
    """The tool-group spec's five tools, plus one in no group."""
    tools = [
        tool(
            "knowledge-query",
            ["read-only", "knowledge", "basic"],
            "analysis",
            ["undefined", "research"],
        ),
        tool("graph-update", ["write", "knowledge", "admin"], None, ["analysis", "modification"]),
        tool("text-completion", ["read-only", "text", "basic"], "undefined", None),
        tool("complex-analysis", ["advanced", "compute", "expensive"], "results", ["analysis"]),
        tool("reset-workflow", ["admin"], "undefined", ["analysis", "results"]),
        tool("archived", [], None, None),
    ]
    snapshot = {
        "tool-service": {
            "spec-service": {
                "request-queue": "non-persistent://tg/request/spec",
                "response-queue": "non-persistent://tg/response/spec",
                "config-params": ["collection"],
            }
        },
        "tool": {descriptor["name"]: descriptor for descriptor in tools},
    }
    path = tmp_path / "snapshot.json"
    path.write_text(json.dumps(snapshot), encoding="utf-8")
    return path


def invoke(*args: str) -> Any:
    return CliRunner().invoke(app, ["groups", *args])


def test_the_table_lists_each_group_with_its_tools_states_and_transitions(config: Path) -> None:
    result = invoke("--config", str(config))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == "9 groups, 6 tools"
    assert lines[2].split() == ["GROUP", "TOOL", "OFFERED", "IN", "STATES", "NEXT", "STATE"]
    rows = [line.split(maxsplit=1) for line in lines[3:] if line]
    assert rows[0] == ["admin", "graph-update      analysis, modification  -"]
    assert rows[1] == ["reset-workflow", "analysis, results       undefined"]
    assert ["text", "text-completion   (any)                   undefined"] in rows
    assert ["(no", "group)  archived          (any)                   -"] in rows
    assert lines[-1] == "Tools with no group are never offered: give them a group to use them."


def test_json_lists_groups_in_order_with_null_meaning_any_state_or_no_change(
    config: Path,
) -> None:
    result = invoke("--config", str(config), "--format", "json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data["groups"]) == [
        "admin",
        "advanced",
        "basic",
        "compute",
        "expensive",
        "knowledge",
        "read-only",
        "text",
        "write",
    ]
    assert data["groups"]["knowledge"] == [
        {
            "name": "knowledge-query",
            "llm-name": "knowledge-query",
            "applicable-states": ["undefined", "research"],
            "state": "analysis",
        },
        {
            "name": "graph-update",
            "llm-name": "graph-update",
            "applicable-states": ["analysis", "modification"],
            "state": None,
        },
    ]
    assert data["groups"]["text"][0]["applicable-states"] is None
    assert [tool["name"] for tool in data["ungrouped"]] == ["archived"]


def test_config_values_are_not_shown(config: Path) -> None:
    for output in ("table", "json"):
        result = invoke("--config", str(config), "--format", output)
        assert SECRET not in result.stdout


def test_an_empty_configuration_says_so(tmp_path: Path) -> None:
    path = tmp_path / "empty.json"
    path.write_text("{}", encoding="utf-8")
    result = invoke("--config", str(path))
    assert result.exit_code == 0
    assert result.stdout.strip() == "0 groups, 0 tools: no tools are configured"


def test_a_bad_configuration_exits_2_naming_the_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"tool": {"t": {"type": "nope"}}}), encoding="utf-8")
    result = invoke("--config", str(path))
    assert result.exit_code == 2
    assert "tool 't'" in result.stderr and str(path) in result.stderr
    assert result.stdout == ""
