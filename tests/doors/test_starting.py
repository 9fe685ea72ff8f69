"""Doors that take callers over the network refuse to start without access control,
unless told ``--no-access-control``, and then say so at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doors.processes import LISTEN

pytestmark = pytest.mark.slow

TOOLBUS = str(Path(sys.executable).parent / "toolbus")
KEYS = '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'
NO_PERMISSIONS = 'broker = "{broker}"\nconfig = "tools.json"\n' + KEYS


def _door(tmp_path: Path, broker: str, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "toolbus.toml").write_text(NO_PERMISSIONS.format(broker=broker))
    (tmp_path / "tools.json").write_text('{"tool-service": {}, "tool": {}}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    return subprocess.Popen(
        [TOOLBUS, *args],
        cwd=tmp_path,
        env={**env, "ALICE_KEY": "k" * 20},
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _said(process: subprocess.Popen[str], until: str) -> list[str]:
    """Lines of stderr up to the one holding ``until`` (or the end), then stop the door."""
    said: list[str] = []
    try:
        assert process.stderr is not None
        for line in process.stderr:
            said.append(line)
            if until in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    return said


DOORS = {
    "agent": ["agent", "serve", "--llm", "scripted://demo"],
    "mcp-http": [
        "mcp", "serve", "--transport", "http", "--config", "tools.json", "--no-live",
    ],
}  # fmt: skip


@pytest.mark.parametrize("door", DOORS, ids=list(DOORS))
def test_a_network_door_refuses_to_start_without_access_control(
    tmp_path: Path, doors_nats: str, door: str
) -> None:
    args = DOORS[door] + (LISTEN if door == "mcp-http" else [])
    process = _door(tmp_path, doors_nats, *args)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2, stderr
    assert "access control is not configured" in stderr and "--no-access-control" in stderr


@pytest.mark.parametrize("door", DOORS, ids=list(DOORS))
def test_no_access_control_serves_and_says_so(tmp_path: Path, doors_nats: str, door: str) -> None:
    args = DOORS[door] + (LISTEN if door == "mcp-http" else [])
    said = _said(_door(tmp_path, doors_nats, *args, "--no-access-control"), "access control is OFF")
    assert any("every caller may use every tool" in line for line in said), said


def test_the_agent_on_memory_needs_no_flag(tmp_path: Path) -> None:
    # memory:// reaches no other process: nobody but this process can call in.
    process = _door(tmp_path, "memory://", "agent", "serve", "--llm", "scripted://demo")
    said = _said(process, "serving agent")
    assert any("serving agent" in line for line in said), said
    assert not any("access control" in line for line in said)
