"""Every door that keeps state in a shared store refuses to start without a seal key, naming
the command that makes one; with the key it starts, and a bad key is named, never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis.server import RedisServer
from toolbus.application.sealing import new_seal_jwk

BIN = Path(sys.executable).parent
TOOLS = '{"tool-service": {}, "tool": {}}'
SETUP = (
    '[permissions]\nfallback = ["default"]\n\n'
    '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'
)

#: Each door's command, as an operator starts it with a shared store configured.
DOORS = {
    "gateway": ["gateway", "--config", "tools.json", "--listen", "127.0.0.1:1"],
    "mcp": ["mcp", "serve", "--config", "tools.json", "--transport", "http", "--listen",
            "127.0.0.1:1"],
    "agent": ["agent", "serve", "--broker", "nats://127.0.0.1:1", "--config", "tools.json",
              "--llm", "scripted://nothing"],
    "approvals": ["approvals", "list"],
}  # fmt: skip


def toolbus(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    return subprocess.run(
        [str(BIN / "toolbus"), *args],
        cwd=tmp_path,
        env={**clean, "ALICE_KEY": "alice-key-0123456789", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("door", sorted(DOORS))
def test_a_door_with_a_shared_store_and_no_seal_key_does_not_start(
    tmp_path: Path, sealing_redis: RedisServer, door: str
) -> None:
    (tmp_path / "tools.json").write_text(TOOLS)
    (tmp_path / "toolbus.toml").write_text(f'state = "{sealing_redis.url}/0"\n' + SETUP)
    result = toolbus(tmp_path, *DOORS[door])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "seal-keys" in result.stderr
    assert "toolbus keys new seal.jwk --algorithm A256GCM" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("door", ["gateway", "approvals"])
def test_a_seal_key_that_is_not_one_is_named_and_never_shown(
    tmp_path: Path, sealing_redis: RedisServer, door: str
) -> None:
    signing = {"kty": "oct", "alg": "HS256", "kid": "sign-1", "k": "c2VjcmV0" * 6}
    (tmp_path / "tools.json").write_text(TOOLS)
    (tmp_path / "key.jwk").write_text(json.dumps(signing))
    (tmp_path / "toolbus.toml").write_text(
        f'state = "{sealing_redis.url}/0"\nseal-keys = ["key.jwk"]\n' + SETUP
    )
    result = toolbus(tmp_path, *DOORS[door])
    assert result.returncode == 2, result.stderr
    assert "is not a seal key" in result.stderr and signing["k"] not in result.stderr


def test_the_keys_command_makes_a_seal_key_only_its_owner_reads(tmp_path: Path) -> None:
    made = toolbus(tmp_path, "keys", "new", "seal.jwk", "--algorithm", "A256GCM", "--kid", "s-1")
    assert made.returncode == 0, made.stderr
    jwk = json.loads((tmp_path / "seal.jwk").read_text())
    assert (jwk["kty"], jwk["alg"], jwk["kid"]) == ("oct", "A256GCM", "s-1")
    assert (tmp_path / "seal.jwk").stat().st_mode & 0o077 == 0
    assert jwk["k"] not in made.stdout + made.stderr
    again = toolbus(tmp_path, "keys", "new", "seal.jwk", "--algorithm", "A256GCM")
    assert again.returncode == 2 and "exists already" in again.stderr


def test_a_memory_store_needs_no_key(tmp_path: Path) -> None:
    """One process's memory is no one else's: nothing to seal it against."""
    (tmp_path / "tools.json").write_text(TOOLS)
    (tmp_path / "toolbus.toml").write_text('state = "memory://"\n' + SETUP)
    result = toolbus(tmp_path, "gateway", "--config", "tools.json", "--listen", "127.0.0.1:99999")
    assert "seal-keys" not in result.stderr
    assert "HOST:PORT" in result.stderr or "port" in result.stderr.lower()


def test_new_seal_keys_are_fresh() -> None:
    first, second = new_seal_jwk(), new_seal_jwk()
    assert first["k"] != second["k"] and first["kid"] != second["kid"]
