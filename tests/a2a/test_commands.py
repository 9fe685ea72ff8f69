"""The A2A bridge's commands refuse bad input before they serve, naming the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolbus.cli import app, assemble


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    assemble()
    return CliRunner()


def test_the_commands_are_the_bridges(runner: CliRunner) -> None:
    serving = runner.invoke(app, ["a2a", "serve", "--help"])
    importing = runner.invoke(app, ["serve", "a2a", "--help"])

    assert serving.exit_code == 0 and "--public-url" in serving.output
    assert importing.exit_code == 0 and "--bearer-env" in importing.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--listen", "8100"], "give HOST:PORT"),
        (["--listen", "127.0.0.1:99999"], "give HOST:PORT"),
        (["--agent", "helper", "--default", "other"], "'other' is not among the --agent names"),
        ([], "needs a way to authenticate callers"),
    ],
    ids=["no host", "port out of range", "default not served", "no credentials"],
)
def test_the_door_refuses_bad_options_before_serving(
    runner: CliRunner,
    arguments: list[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "toolbus.toml").write_text('broker = "memory://"\n', encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG"):
        monkeypatch.delenv(name, raising=False)

    result = runner.invoke(app, ["a2a", "serve", "--listen", "127.0.0.1:0", *arguments])

    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["ftp://agents.example"], "is not an http(s) URL of an agent"),
        (["https://me:secret@agents.example"], "must not hold credentials"),
        (["https://agents.example", "--card-path", "card.json"], "must start with '/'"),
        (["https://agents.example", "--header", "X-Key"], "'X-Key': give NAME=VARIABLE"),
        (
            ["https://agents.example", "--header", "X-Key=NOT_SET_A2A_42"],
            "environment variable 'NOT_SET_A2A_42' is not set",
        ),
    ],
    ids=["not http", "credentials in the URL", "relative card path", "header", "unset header"],
)
def test_a_remote_agent_s_bad_address_is_named(
    runner: CliRunner, arguments: list[str], message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOT_SET_A2A_42", raising=False)
    result = runner.invoke(
        app, ["serve", "a2a", *arguments, "--toolset", "travel", "--broker", "memory://"]
    )

    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "secret" not in result.output.replace("must not hold credentials", "")
