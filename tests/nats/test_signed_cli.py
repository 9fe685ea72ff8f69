"""``toolbus keys new``, ``toolbus serve --verify-key`` and ``toolbus call --sign-key``,
as real processes on a real nats-server."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.test_serve_process import STARTUP, ServeProcess, toolbus_command

pytestmark = [pytest.mark.broker, pytest.mark.slow]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}


@pytest.fixture
def served(
    nats_url: str, tmp_path: Path, env: dict[str, str]
) -> Iterator[tuple[ServeProcess, Path]]:
    toolbus(
        ["keys", "new", "gateway.jwk", "--kid", "gw-1", "--public", "gw.pub.jwk"], tmp_path, env
    )
    process = ServeProcess(
        ["joke-service", "--broker", nats_url, "--verify-key", "gw.pub.jwk", "--no-announce"],
        env,
        tmp_path,
    )
    try:
        process.wait_for_line("serving joke-service", STARTUP)
        process.wait_for_line("verifying callers: signed calls only, keys gw-1", STARTUP)
        yield process, tmp_path
    finally:
        process.kill()


def toolbus(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*toolbus_command(), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP,
        check=False,
    )


def test_keys_new_writes_a_private_key_for_its_owner_only(
    tmp_path: Path, env: dict[str, str]
) -> None:
    done = toolbus(["keys", "new", "signer.jwk", "--kid", "cli-1"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "signer.jwk").stat().st_mode & 0o777 == 0o600
    private = json.loads((tmp_path / "signer.jwk").read_text())
    public = json.loads(done.stdout)
    assert public["kid"] == private["kid"] == "cli-1"
    assert "d" in private and "d" not in public
    again = toolbus(["keys", "new", "signer.jwk"], tmp_path, env)
    assert again.returncode == 2
    assert "exists already" in again.stderr
    # On memory:// the in-process services verify the call with the signer's key.
    signed = toolbus(
        ["call", "tell-joke", "--sign-key", "signer.jwk", "-a", "topic=owls"], tmp_path, env
    )
    assert signed.returncode == 0, signed.stderr
    assert "verifies no tokens" not in signed.stderr


def test_a_signed_call_is_served_and_an_unsigned_one_refused(
    served: tuple[ServeProcess, Path], nats_url: str, env: dict[str, str]
) -> None:
    _, here = served
    call = ["call", "tell-joke", "-a", "topic=cats", "--broker", nats_url, "--timeout", "20"]
    signed = toolbus([*call, "--sign-key", "gateway.jwk", "--user", "alice"], here, env)
    assert signed.returncode == 0, signed.stderr
    assert "alice" in signed.stdout

    unsigned = toolbus(call, here, env)
    assert unsigned.returncode == 1
    assert "unauthorized: the call carries no call token" in unsigned.stderr

    toolbus(["keys", "new", "stranger.jwk", "--kid", "stranger"], here, env)
    stranger = toolbus([*call, "--sign-key", "stranger.jwk"], here, env)
    assert stranger.returncode == 1
    assert "unknown key" in stranger.stderr


def test_signing_key_mistakes_are_named(tmp_path: Path, env: dict[str, str]) -> None:
    missing = toolbus(["call", "tell-joke", "--sign-key", "env:NO_SUCH_KEY"], tmp_path, env)
    assert missing.returncode == 2
    assert "environment variable NO_SUCH_KEY is not set" in missing.stderr
    groups = toolbus(["call", "tell-joke", "--group", "admin"], tmp_path, env)
    assert groups.returncode == 2
    assert "give --sign-key too" in groups.stderr
    relaxed = toolbus(["serve", "joke-service", "--allow-unsigned"], tmp_path, env)
    assert relaxed.returncode == 2
    assert "give the keys to verify with too" in relaxed.stderr
