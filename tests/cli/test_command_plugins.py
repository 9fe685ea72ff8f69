"""Distributions add commands through the ``toolbus.commands`` entry points."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from toolbus.cli._app import DefaultCommandGroup
from toolbus.cli._first_party import (
    FIRST_PARTY_COMMANDS,
    FirstPartyCommand,
    add_missing_first_party,
)

PLUGIN = '''
import typer

from toolbus.cli.plugin_api import CommandLine, fail
from toolbus.plugins import hookimpl


def hello(name: str = "world") -> None:
    """Say hello."""
    typer.echo(f"hello {name}")


def echo_kind(word: str) -> None:
    """Serve nothing, say the word."""
    typer.echo(f"serving {word}")


def shout(word: str) -> None:
    """Say the word loudly, unless it is empty."""
    if not word:
        fail("give a word to shout")
    typer.echo(word.upper())


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.command("hello", hello)
    cli.serve_command("echo-kind", echo_kind)
    cli.group("greet", help="Greetings.").command("shout", shout)
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


@pytest.mark.slow
def test_a_distribution_adds_top_level_and_serve_commands(tmp_path: Path) -> None:
    _install_command_plugin(tmp_path, "hello_commands", PLUGIN)

    hello = _toolbus(tmp_path, "hello", "--name", "ada")
    kind = _toolbus(tmp_path, "serve", "echo-kind", "llamas")
    shout = _toolbus(tmp_path, "greet", "shout", "hey")
    empty = _toolbus(tmp_path, "greet", "shout", "")
    listed = _toolbus(tmp_path, "plugins")

    assert (hello.returncode, hello.stdout) == (0, "hello ada\n"), hello.stderr
    assert (kind.returncode, kind.stdout) == (0, "serving llamas\n"), kind.stderr
    assert (shout.returncode, shout.stdout) == (0, "HEY\n"), shout.stderr
    assert (empty.returncode, empty.stderr) == (2, "error: give a word to shout\n")
    assert "Commands:" in listed.stdout
    assert "hello_commands" in listed.stdout


DOCS_PLUGINS = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def _documented_command_plugin(site: Path) -> str:
    """Install the command plugin docs/plugins.md shows, as a distribution; its module name."""
    page = DOCS_PLUGINS.read_text(encoding="utf-8")
    found = re.search(r"<!-- command example: (\w+)\.py -->\n```python\n(.*?)```", page, re.S)
    assert found, "docs/plugins.md has no command example"
    _install_command_plugin(site, found[1], found[2])
    return found[1]


@pytest.mark.slow
def test_the_documented_command_plugin_works_as_the_page_says(tmp_path: Path) -> None:
    _documented_command_plugin(tmp_path)

    found = _toolbus(tmp_path, "forecast", "Paris")
    unknown = _toolbus(tmp_path, "forecast", "Atlantis")
    blank = _toolbus(tmp_path, "forecast", " ")

    assert (found.returncode, found.stdout) == (0, "Paris: sunny, 24 °C\n"), found.stderr
    assert (unknown.returncode, unknown.stderr) == (1, "error: no forecast for Atlantis\n")
    assert (blank.returncode, blank.stderr) == (
        2,
        "error: give a city, e.g. toolbus forecast Paris\n",
    )


def test_the_documented_serve_command_serves_until_signalled(tmp_path: Path) -> None:
    _documented_command_plugin(tmp_path)
    command = ["serve", "forecast", "--broker", "memory://", "--loop", "asyncio"]
    process = subprocess.Popen(
        [sys.executable, "-c", "from toolbus.cli import main; main()", *command],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
    try:
        assert process.stderr is not None
        seen = []
        for line in process.stderr:  # the test's timeout bounds a process that never serves
            seen.append(line)
            if line.startswith("serving forecast"):
                process.send_signal(signal.SIGTERM)
                break
        _, rest = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()

    lines = "".join([*seen, rest]).splitlines()
    assert process.returncode == 0, lines
    assert "serving forecast on non-persistent://tg/request/forecast via memory://" in lines
    assert lines[-1] == "SIGTERM: draining calls in flight"


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
    add_missing_first_party(app, serve)
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
    add_missing_first_party(app, serve)

    result = CliRunner().invoke(app, ["gateway"])

    assert (result.exit_code, result.output) == (0, "the real gateway\n")


def test_loading_every_command_imports_no_heavy_library() -> None:
    # Every toolbus command, --help and a mistyped broker URL included, pays for
    # what loading the command line imports: the distributions' libraries (FastAPI,
    # the MCP SDK, httpx, the broker clients) wait until a command uses them.
    heavy = ("fastapi", "starlette", "uvicorn", "mcp", "httpx", "httpx2", "nats", "aiokafka")
    probe = (
        "import sys, toolbus.cli; toolbus.cli.assemble(); "
        f"print(' '.join(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)

    assert done.stdout.split() == []
