"""Distributions add commands through the ``toolbus.commands`` entry points."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from toolbus.cli.app import DefaultCommandGroup
from toolbus.cli.extensions import (
    FIRST_PARTY_COMMANDS,
    CommandLine,
    FirstPartyCommand,
    add_missing_first_party,
)

PLUGIN = '''
import typer

from toolbus.plugins import hookimpl


@hookimpl
def toolbus_register_commands(cli):
    @cli.app.command("hello")
    def hello(name: str = "world") -> None:
        """Say hello."""
        typer.echo(f"hello {name}")

    @cli.serve.command("echo-kind")
    def echo_kind(word: str) -> None:
        """Serve nothing, say the word."""
        typer.echo(f"serving {word}")
'''


def _install_command_plugin(site: Path, module: str, source: str) -> None:
    """A real distribution on ``site``: its module and a dist-info with the entry point."""
    (site / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[toolbus.commands]\n{module} = {module}\n")


def _toolbus(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run(
        [sys.executable, "-c", "from toolbus.cli import main; main()", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_a_distribution_adds_top_level_and_serve_commands(tmp_path: Path) -> None:
    _install_command_plugin(tmp_path, "hello_commands", PLUGIN)

    hello = _toolbus(tmp_path, "hello", "--name", "ada")
    kind = _toolbus(tmp_path, "serve", "echo-kind", "llamas")
    listed = _toolbus(tmp_path, "plugins")

    assert (hello.returncode, hello.stdout) == (0, "hello ada\n"), hello.stderr
    assert (kind.returncode, kind.stdout) == (0, "serving llamas\n"), kind.stderr
    assert "Commands:" in listed.stdout
    assert "hello_commands" in listed.stdout


def test_a_broken_command_plugin_is_skipped_with_a_log_line(tmp_path: Path) -> None:
    _install_command_plugin(tmp_path, "broken_commands", "raise RuntimeError('boom')\n")

    result = _toolbus(tmp_path, "plugins")

    assert result.returncode == 0, result.stderr
    assert "broken_commands" in result.stderr
    assert "failed to load; skipped" in result.stderr


def test_serve_without_a_kind_serves_services(tmp_path: Path) -> None:
    # The default command: an unknown service name gets serve's own error, not
    # "no such command".
    result = _toolbus(tmp_path, "serve", "no-such-service", "--broker", "memory://")

    assert result.returncode == 2
    assert "no-such-service" in result.stderr
    assert "No such command" not in result.stderr


@pytest.mark.parametrize("command", FIRST_PARTY_COMMANDS, ids=lambda c: c.name)
def test_a_missing_first_party_command_says_how_to_install_it(
    command: FirstPartyCommand,
) -> None:
    app = typer.Typer(add_completion=False)
    serve = typer.Typer(name="serve", cls=DefaultCommandGroup)

    @app.callback()
    def root() -> None: ...

    @serve.command("services")
    def services(names: list[str]) -> None: ...

    app.add_typer(serve)
    add_missing_first_party(CommandLine(app=app, serve=serve))
    words = ["serve", command.name] if command.under_serve else [command.name]

    result = CliRunner().invoke(app, [*words, "--toolset", "x"])

    assert result.exit_code == 2
    assert f"pip install 'toolbus[{command.extra}]'" in result.output


def test_an_installed_command_is_not_replaced_by_its_stand_in() -> None:
    app = typer.Typer(add_completion=False)
    serve = typer.Typer(name="serve", cls=DefaultCommandGroup)

    @app.command("gateway")
    def gateway() -> None:
        typer.echo("the real gateway")

    @app.command("other")
    def other() -> None: ...

    app.add_typer(serve)
    add_missing_first_party(CommandLine(app=app, serve=serve))

    result = CliRunner().invoke(app, ["gateway"])

    assert (result.exit_code, result.output) == (0, "the real gateway\n")
