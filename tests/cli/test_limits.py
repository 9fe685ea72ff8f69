"""Limits and budgets on the command line: ``toolbus call`` and ``toolbus ask`` exit 75
(try again later) saying which limit and when.

``toolbus call`` runs once per invocation, so its counts live in a shared
store: Debian's redis-server, sealed as every door's store is. ``toolbus ask``
on memory:// runs the agent in its own process, where a budget that one turn
spends stops the next.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

import toolbus.cli
from tests.redis.server import RedisServer
from toolbus.application.sealing import new_seal_jwk
from toolbus.cli import app

Invoke = Callable[..., Result]

EXIT_LIMITED = 75


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    pytest.importorskip("toolbus_redis")
    server = RedisServer(tmp_path_factory.mktemp("redis-cli-limits"))
    with server.running():
        yield server


@pytest.fixture
def toolbus_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Invoke:
    toolbus.cli.assemble()
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_LLM", "TOOLBUS_STATE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TOOLBUS_SEAL_KEYS", raising=False)

    def invoke(*args: str) -> Result:
        return CliRunner().invoke(app, list(args))

    return invoke


def shared_settings(directory: Path, redis: RedisServer, body: str) -> None:
    (directory / "seal.jwk").write_text(json.dumps(new_seal_jwk("seal-cli-limits")))
    url = f"{redis.url}/0?prefix=cli-limits-{uuid.uuid4().hex[:8]}"
    (directory / "toolbus.toml").write_text(
        f'state = "{url}"\nseal-keys = ["seal.jwk"]\n\n{body}', encoding="utf-8"
    )


def test_toolbus_call_past_a_limit_exits_75_naming_it(
    toolbus_cli: Invoke, tmp_path: Path, redis: RedisServer
) -> None:
    shared_settings(
        tmp_path,
        redis,
        '[[limits]]\nname = "sums"\ncalls = 2\nevery = "1h"\ntools = ["calculate"]\n',
    )
    calls = [toolbus_cli("call", "calculate", "--arg", "expression=1+1") for _ in range(3)]
    another = toolbus_cli("call", "calculate", "--arg", "expression=1+1", "--user", "bob")

    assert [r.exit_code for r in calls] == [0, 0, EXIT_LIMITED], [r.output for r in calls]
    assert calls[0].stdout.strip() == "2"
    assert "the limit 'sums' allows 2 calls every 1h" in calls[2].stderr
    assert "Try again in" in calls[2].stderr
    assert another.exit_code == 0, another.output  # counted per user


def test_toolbus_call_with_its_budget_spent_exits_75(
    toolbus_cli: Invoke, tmp_path: Path, redis: RedisServer
) -> None:
    shared_settings(
        tmp_path,
        redis,
        "[costs]\ntools = { calculate = 0.6 }\n\n"
        '[[budgets]]\nname = "daily"\namount = 1\nevery = "1d"\n',
    )
    calls = [toolbus_cli("call", "calculate", "--arg", "expression=2*3") for _ in range(3)]

    assert [r.exit_code for r in calls] == [0, 0, EXIT_LIMITED], [r.output for r in calls]
    assert "the budget 'daily' (1 USD every 1d) is spent" in calls[2].stderr


def test_toolbus_ask_stopped_by_a_spent_budget_exits_75(
    toolbus_cli: Invoke, tmp_path: Path
) -> None:
    turns = [
        {
            "text": "Working.",
            "calls": [{"name": "calculate", "arguments": {"expression": "6 * 7"}}],
            "input_tokens": 10,
            "output_tokens": 10,
        },
        {"text": "It is 42."},
    ]
    (tmp_path / "script.json").write_text(json.dumps(turns))
    (tmp_path / "toolbus.toml").write_text(
        '[costs.models."scripted-script.json"]\ninput-per-million = 100000\n\n'
        '[[budgets]]\nname = "tokens"\namount = 0.5\nevery = "1d"\n'
    )
    result = toolbus_cli("ask", "What is 6 * 7?", "--llm", f"scripted://{tmp_path / 'script.json'}")

    # The first turn spent the budget (1.0 of 0.5): its call was refused, the model read
    # why, and the turn after it was not taken.
    assert result.exit_code == EXIT_LIMITED, result.output
    assert "← [refused] The call of 'calculate' was not made: the budget" in result.stdout
    assert "error (budget-spent):" in result.stderr
    assert "The next model turn was not made: the budget 'tokens'" in result.stderr
