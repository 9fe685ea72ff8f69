"""``toolbus ask``, ``toolbus agent serve`` and the demo's agent section, in-process on memory://."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import toolbus.cli
from toolbus.application.sealing import new_seal_jwk
from toolbus.cli import app

Invoke = Callable[..., Result]


@pytest.fixture(scope="module", autouse=True)
def commands_registered() -> None:
    toolbus.cli.assemble()


@pytest.fixture
def toolbus_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_LLM"):
        monkeypatch.delenv(name, raising=False)

    def invoke(*args: str, env: dict[str, str] | None = None) -> Result:
        return CliRunner().invoke(app, list(args), env=env)

    return invoke


def script_file(directory: Path, turns: list[dict[str, object]]) -> str:
    path = directory / "script.json"
    path.write_text(json.dumps(turns), encoding="utf-8")
    return f"scripted://{path}"


CALCULATE = [
    {"text": "Working.", "calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}]},
    {"text": "It is 42."},
]


def test_demo_runs_the_agent_with_a_clearly_labelled_scripted_model(toolbus_cli: Invoke) -> None:
    result = toolbus_cli("demo")

    assert result.exit_code == 0, result.output
    section = result.stdout.split("The agent loop", 1)[1]
    assert section.startswith(", with a SCRIPTED model (deterministic turns, not an LLM;")
    assert "→ calculate(" in section and "← 42" in section
    assert "6 * 7 is 42, and that deserves a joke." in section
    assert "state: calculated" in result.stderr


def test_demo_uses_the_model_llm_names(toolbus_cli: Invoke, tmp_path: Path) -> None:
    turns = [{"text": "A real model would say more; this is " + "quite a long answer. " * 12}]
    result = toolbus_cli("demo", "--llm", script_file(tmp_path, turns))

    assert result.exit_code == 0, result.output
    section = result.stdout.split("The agent loop", 1)[1]
    assert section.startswith(", with the model scripted:")
    assert "SCRIPTED" not in section
    assert "quite a long answer." in section


def test_ask_streams_events_and_ends_with_the_final_state(
    toolbus_cli: Invoke, tmp_path: Path
) -> None:
    result = toolbus_cli("ask", "What is 6 * 7?", "--llm", script_file(tmp_path, CALCULATE))

    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "Working.",
        '→ calculate({"expression": "6 * 7"})',
        "← 42",
        "It is 42.",
    ]
    assert "[state: undefined · model: scripted-script.json · 2 iterations" in result.stderr


def test_ask_json_prints_one_event_per_line(toolbus_cli: Invoke, tmp_path: Path) -> None:
    url = script_file(tmp_path, CALCULATE)
    result = toolbus_cli("ask", "What is 6 * 7?", "--llm", url, "--json", "--user", "alice")

    assert result.exit_code == 0, result.output
    events = [json.loads(line) for line in result.stdout.splitlines()]
    # A message may come in chunks; its last has end_of_message set.
    assert [e["chunk_type"] for e in events] == ["thought", "action", "observation", "answer"]
    assert all(e["end_of_message"] for e in events)
    ends = events
    assert events[0]["content"] == "Working."
    assert ends[1]["arguments"] == {"expression": "6 * 7"}
    assert ends[2]["content"] == "42" and ends[2]["status"] == "ok"
    assert events[-1]["end_of_stream"] is True and events[-1]["state"] == "undefined"


def test_ask_reports_an_agent_error_and_exits_1(toolbus_cli: Invoke, tmp_path: Path) -> None:
    url = script_file(tmp_path, [{"failure": {"status": 500, "message": "down"}}])
    result = toolbus_cli("ask", "Hello?", "--llm", url)

    assert result.exit_code == 1, result.output
    assert "error (model-error):" in result.stderr and "HTTP 500: down" in result.stderr


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["ask", "Hello?"], "needs a model: pass --llm URL or set TOOLBUS_LLM"),
        (["ask", "Hello?", "--llm", "nosuch://x"], "no LLM adapter for nosuch://"),
        (["ask", "Hello?", "--llm", "scripted://nosuch"], "no built-in script 'nosuch'"),
        (["ask", "Hello?", "--llm", "scripted:///no/such/file.json"], "cannot read the script"),
        (["ask", "Hello?", "--llm", "openai://gpt-4.1-mini"], "set the environment variable"),
        (["ask", "Hello?", "--llm", "openai://m?api_key=sk-x"], "environment variables only"),
        (["agent", "serve"], "no model given: pass --llm URL or set TOOLBUS_LLM"),
        (["agent", "serve", "--llm", "scripted://demo", "--time-limit", "0"], "time_limit"),
        (["ask", "Hello?", "--llm", "scripted://demo", "--no-wait"], "--no-wait: on memory://"),
    ],
)
def test_bad_input_is_refused_with_the_fix(
    toolbus_cli: Invoke, args: list[str], fragment: str
) -> None:
    result = toolbus_cli(*args, env={"OPENAI_API_KEY": ""})

    assert result.exit_code == 2, result.output
    assert fragment in result.stderr
    assert "Traceback" not in result.output
    assert "sk-x" not in result.output


def test_agent_serve_checks_its_tasks_table_before_connecting(
    toolbus_cli: Invoke, tmp_path: Path
) -> None:
    (tmp_path / "toolbus.toml").write_text(
        'broker = "nats://127.0.0.1:1"\nstate = "redis://127.0.0.1:1"\n'
        'seal-keys = ["env:SEAL_KEY"]\n\n[tasks]\nlease = 0\n'
    )
    result = toolbus_cli(
        "agent",
        "serve",
        "--llm",
        "scripted://demo",
        "--no-access-control",
        env={"SEAL_KEY": json.dumps(new_seal_jwk("seal-1"))},
    )

    assert result.exit_code == 2, result.output
    assert "toolbus.toml [tasks]" in result.stderr and "lease" in result.stderr
    assert "Traceback" not in result.output
