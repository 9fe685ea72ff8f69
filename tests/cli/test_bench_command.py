"""``toolbus bench`` measures real calls and reports them readably or as JSON."""

from __future__ import annotations

import importlib
import json

from typer.testing import CliRunner

from toolbus.cli import app

importlib.import_module("toolbus.cli.bench")


def test_json_reports_every_level_with_calls_and_no_leaked_waiters() -> None:
    result = CliRunner().invoke(
        app, ["bench", "--broker", "memory://", "--seconds", "0.2", "-n", "1", "-n", "8", "--json"]
    )
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["broker"] == "memory://"
    assert [f["in_flight"] for f in report["figures"]] == [1, 8]
    for figure in report["figures"]:
        assert figure["calls"] > 0 and figure["errors"] == 0
        assert figure["throughput"] > 0
        assert 0 < figure["p50_us"] <= figure["p99_us"]
    assert report["pending_after"] == 0


def test_the_table_has_a_row_per_level() -> None:
    result = CliRunner().invoke(
        app, ["bench", "--broker", "memory://", "--seconds", "0.1", "-n", "4", "--payload", "1000"]
    )
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert rows[0][:2] == ["in", "flight"]
    assert rows[1][0] == "4" and rows[1][-1] == "0"


def test_an_unknown_broker_scheme_is_a_clear_error() -> None:
    result = CliRunner().invoke(app, ["bench", "--broker", "mqtt://x", "--seconds", "0.1"])
    assert result.exit_code == 2
    assert "no broker adapter for mqtt://" in result.output


def test_credentials_in_a_broker_url_are_never_printed() -> None:
    from toolbus.cli.plugin_api import redact_url

    assert redact_url("kafka://alice:s3cret@h1:9092,h2:9092") == "kafka://***@h1:9092,h2:9092"
    assert redact_url("nats://t0ken@127.0.0.1:4222") == "nats://***@127.0.0.1:4222"
    assert redact_url("memory://") == "memory://"
