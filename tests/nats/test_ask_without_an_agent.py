"""``toolbus ask`` on a broker where no agent service runs: what it does before it says so."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

import toolbus.cli
import toolbus.cli.agent
from tests.nats.server import NatsServer
from toolbus.cli import app

pytestmark = [pytest.mark.broker]


def test_asking_a_broker_loads_no_tool_and_waits_only_the_time_given(
    nats_server: NatsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The agent service has the tools: the asker loads none (the installed plugins'
    imports were most of its start-up), and it looks for a service no longer than
    it was told to."""

    def no_tools_here() -> None:
        raise AssertionError("toolbus ask loaded the tool plugins to ask an agent service")

    toolbus.cli.assemble()
    monkeypatch.setattr(toolbus.cli.agent, "load_tool_plugins", no_tools_here)
    monkeypatch.chdir(tmp_path)
    queue = f"non-persistent://tg/request/agent-{uuid.uuid4().hex[:8]}"
    broker = ["--broker", nats_server.url, "--request-queue", queue]
    asked = CliRunner().invoke(app, ["ask", "Anyone?", *broker, "--timeout", "0.5"])

    assert asked.exit_code == 1, asked.output
    assert f"no agent service answers on {queue!r}" in asked.output
    assert "(none said so within 0.5 s)" in asked.output
