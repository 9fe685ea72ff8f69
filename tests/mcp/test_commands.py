"""The bridge's commands replace the core's stand-ins, and refuse bad input clearly."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from toolbus.cli import app, assemble


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    assemble()
    return CliRunner()


def test_toolbus_mcp_serve_is_the_real_command(runner: CliRunner) -> None:
    result = runner.invoke(app, ["mcp", "serve", "--help"])
    assert result.exit_code == 0
    assert "--transport" in result.output and "pip install" not in result.output


def test_toolbus_serve_mcp_is_the_real_command(runner: CliRunner) -> None:
    result = runner.invoke(app, ["serve", "mcp", "--help"])
    assert result.exit_code == 0
    assert "--toolset" in result.output and "pip install" not in result.output


#: A server at a URL (the OAuth options come after).
OAUTH = ["--toolset", "m", "--url", "https://h/mcp"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--toolset", "m"], "give exactly one of --command or --url"),
        (["--toolset", "m", "--command", "x", "--url", "http://h/mcp"], "exactly one of"),
        (
            ["--toolset", "m", "--url", "http://h/mcp", "--env", "A"],
            "an HTTP server takes --header",
        ),
        (["--toolset", "m", "--command", "x", "--env", "NOT_SET_HERE_42"], "'NOT_SET_HERE_42'"),
        (["--toolset", "bad queue!", "--command", "x"], "bad queue!"),
        (
            ["--toolset", "m", "--url", "https://h/mcp", "--oauth-client-id", "ID"],
            "field '--oauth-client-id': needs --oauth-issuer",
        ),
        (
            ["--toolset", "m", "--command", "x", "--oauth-issuer", "https://login.example"],
            "field '--oauth-issuer': is for a server at a --url",
        ),
        (
            [*OAUTH, "--oauth-issuer", "http://login.example"],
            "the client secret would travel in the clear",
        ),
        (
            [*OAUTH, "--oauth-issuer", "https://login.example", "--oauth-client-id", "X_ID_42"],
            "field '--oauth-client-secret': is required with --oauth-issuer",
        ),
        (
            [*OAUTH, "--oauth-issuer", "https://l.example", "--oauth-client-secret", "NOT_SET_42"],
            "environment variable 'NOT_SET_42' is not set",
        ),
    ],
    ids=[
        "no server",
        "both",
        "env for url",
        "unset variable",
        "bad toolset name",
        "oauth without issuer",
        "oauth for a command",
        "oauth over plain http",
        "no client secret",
        "unset client secret",
    ],
)
def test_bad_toolset_options_are_named(
    runner: CliRunner, arguments: list[str], message: str
) -> None:
    result = runner.invoke(app, ["serve", "mcp", *arguments])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_an_unknown_transport_is_named(runner: CliRunner) -> None:
    result = runner.invoke(app, ["mcp", "serve", "--transport", "carrier-pigeon"])
    assert result.exit_code == 2
    assert "carrier-pigeon" in result.output


def test_http_without_api_keys_says_where_to_put_them(
    runner: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["mcp", "serve", "--transport", "http"])
    assert result.exit_code == 2
    assert "[[credentials.api-keys]]" in result.output
    assert "[mcp.jwt]" in result.output


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ("[mcp]\nport = 1\n", "toolbus.toml [mcp] field 'port': is not an MCP setting"),
        (
            '[mcp.jwt]\njwks-url = "https://l.example/jwks"\nresource = "https://t.example/mcp"\n',
            "toolbus.toml [mcp.jwt] field 'issuer': is required with jwks-url",
        ),
        ("[mcp.jwt]\nleeway = -1\n", "field 'jwt.leeway'"),
    ],
    ids=["unknown key", "no issuer", "bad value"],
)
def test_mcp_settings_that_cannot_work_are_named(
    runner: CliRunner,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings: str,
    message: str,
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "toolbus.toml").write_text(settings)
    result = runner.invoke(app, ["mcp", "serve", "--transport", "http"])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_loading_the_commands_does_not_import_the_sdk() -> None:
    import subprocess
    import sys

    code = (
        "import sys, toolbus_mcp, toolbus_mcp.commands\n"
        "assert 'mcp' not in sys.modules, 'the SDK was imported'\n"
        "for name in toolbus_mcp.__all__: getattr(toolbus_mcp, name)\n"
        "assert 'mcp' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def serve_mcp(command: str, *options: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    toolbus = Path(sys.executable).with_name("toolbus")
    return subprocess.run(
        [str(toolbus), "serve", "mcp", "--toolset", "m", "--command", command, *options],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.slow
def test_a_server_that_never_answers_fails_after_connect_timeout(tmp_path: Path) -> None:
    silent = 100  # seconds the "server" keeps quiet before it exits
    started = time.monotonic()
    done = serve_mcp(f"sleep {silent}", "--connect-timeout", "1", cwd=tmp_path)
    took = time.monotonic() - started

    assert done.returncode == 1
    assert "no answer in time" in done.stderr
    # Ended by its 1 s limit, not by the server's exit. (Starting, the handshake and
    # the tool list share that one limit: a discover probe, then the initialize
    # handshake, each waited it out before.)
    assert took < silent / 2, f"{took:.1f} s for a 1 s --connect-timeout"


@pytest.mark.slow
def test_a_command_printing_what_is_not_mcp_is_said_in_one_line(tmp_path: Path) -> None:
    done = serve_mcp(f"{sys.executable} -c \"print('hello')\"", cwd=tmp_path)

    assert done.returncode == 1
    assert "Traceback" not in done.stderr and "pydantic" not in done.stderr, done.stderr
    (said,) = [line for line in done.stderr.splitlines() if "not an MCP message" in line]
    assert "'hello'" in said
