"""``toolbus gateway`` comes from the toolbus.commands entry point and explains bad set-ups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def gateway(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    return subprocess.run(
        [str(BIN / "toolbus"), "gateway", *args],
        cwd=tmp_path,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_command_is_registered_with_its_options(tmp_path: Path) -> None:
    result = gateway(tmp_path, "--help")
    assert result.returncode == 0
    for option in ("--broker", "--config", "--live", "--listen", "--sign-key"):
        assert option in result.stdout


KEYS_TOML = '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'


def test_a_broker_that_is_down_or_a_missing_configuration_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "toolbus.toml").write_text(KEYS_TOML)
    (tmp_path / "tools.json").write_text('{"tool-service": {}, "tool": {}}')
    key = {"ALICE_KEY": "k" * 20}
    down = gateway(tmp_path, "--broker", "nats://127.0.0.1:1", "--config", "tools.json", **key)
    missing = gateway(tmp_path, "--config", "missing.json", **key)
    assert down.returncode == 1 and "error: cannot connect to NATS" in down.stderr
    assert missing.returncode == 2 and "missing.json" in missing.stderr
    for result in (down, missing):
        assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("toml", "args", "env", "message"),
    [
        ("", ["--config", "x.json"], {}, "no way to authenticate callers"),
        (KEYS_TOML, [], {"ALICE_KEY": "k" * 20}, "no tool configuration"),
        (KEYS_TOML, ["--config", "x.json"], {}, "'ALICE_KEY' is not set"),
        (
            KEYS_TOML,
            ["--config", "x.json", "--listen", "8080"],
            {"ALICE_KEY": "k" * 20},
            "HOST:PORT",
        ),
        ("[gateway]\nmax-sessions = 3\n" + KEYS_TOML, [], {}, "max-sessions"),
        (
            KEYS_TOML,
            ["--config", "x.json", "--sign-key", "env:GATEWAY_KEY"],
            {"ALICE_KEY": "k" * 20},
            "environment variable GATEWAY_KEY is not set",
        ),
    ],
)
def test_a_bad_setup_stops_with_a_message_that_names_it(
    tmp_path: Path, toml: str, args: list[str], env: dict[str, str], message: str
) -> None:
    (tmp_path / "toolbus.toml").write_text(toml)
    result = gateway(tmp_path, *args, **env)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "k" * 20 not in result.stderr


@pytest.mark.parametrize(
    ("state", "message"),
    [
        (None, "name a state store in toolbus.toml"),
        ("memory://sessions", "lives in each worker's own memory"),
    ],
)
def test_workers_that_would_not_share_sessions_are_refused(
    tmp_path: Path, state: str | None, message: str
) -> None:
    toml = KEYS_TOML if state is None else f'state = "{state}"\n' + KEYS_TOML
    (tmp_path / "toolbus.toml").write_text(toml)
    (tmp_path / "tools.json").write_text('{"tool-service": {}, "tool": {}}')
    result = gateway(tmp_path, "--config", "tools.json", "--workers", "2", ALICE_KEY="k" * 20)
    assert result.returncode == 2, result.stderr
    assert "--workers 2" in result.stderr and message in result.stderr
    assert "Traceback" not in result.stderr


def test_workers_on_a_port_the_system_chooses_are_refused(tmp_path: Path) -> None:
    (tmp_path / "toolbus.toml").write_text(KEYS_TOML)
    (tmp_path / "tools.json").write_text('{"tool-service": {}, "tool": {}}')
    args = ["--config", "tools.json", "--workers", "2", "--listen", "127.0.0.1:0"]
    result = gateway(tmp_path, *args, ALICE_KEY="k" * 20)
    assert result.returncode == 2, result.stderr
    assert "--workers 2: the workers share one port, which must be named" in result.stderr
