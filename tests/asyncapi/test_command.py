"""``toolbus asyncapi``: the document of a configuration or of a live broker, JSON or YAML."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
import typer.core
import typer.main
import yaml
from typer.testing import CliRunner, Result

import toolbus.cli.asyncapi  # noqa: F401  (registers the command)
from tests.asyncapi.support import needs_parser, parser_problems, schema_problems
from tests.live.test_processes import started
from toolbus.application.live.config_files import load_registry_from_path
from toolbus.cli import app
from toolbus.cli.plugin_api import EXIT_BAD_INPUT
from toolbus.domain.asyncapi.document import asyncapi_document
from toolbus.plugins import asyncapi_broker

WORKFLOW = Path(__file__).resolve().parents[1] / "data" / "workflow.json"
TOOLBUS = str(Path(sys.executable).with_name("toolbus"))
NATS = "nats://127.0.0.1:4222"


def run(*args: str) -> Result:
    command = ["asyncapi", *args]
    if not isinstance(typer.main.get_command(app), typer.core.TyperGroup):
        command = list(args)  # the only command registered: typer runs it as the app
    return CliRunner().invoke(app, command, env={"TOOLBUS_BROKER": NATS})


def test_json_is_the_document_of_the_configuration_on_the_broker() -> None:
    result = run("--config", str(WORKFLOW))

    assert result.exit_code == 0, result.output
    expected = asyncapi_document(
        load_registry_from_path(WORKFLOW),
        asyncapi_broker(NATS),
        version=json.loads(result.stdout)["info"]["version"],
    )
    assert json.loads(result.stdout) == expected


def test_yaml_says_the_same_and_a_file_gets_it(tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.yaml"
    as_json = json.loads(run("--config", str(WORKFLOW)).stdout)
    result = run("--config", str(WORKFLOW), "--format", "yaml", "--output", str(out))

    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    text = out.read_text(encoding="utf-8")
    assert text.startswith("asyncapi: 3.0.0\ninfo:\n")
    assert yaml.safe_load(text) == as_json


def test_yaml_without_pyyaml_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # as if not installed
    result = run("--config", str(WORKFLOW), "--format", "yaml")

    assert result.exit_code == EXIT_BAD_INPUT
    assert "pip install 'toolbus[yaml]'" in result.output
    assert "--format json" in result.output


def test_live_and_a_configuration_file_are_either_or() -> None:
    result = run("--config", str(WORKFLOW), "--live")

    assert result.exit_code == EXIT_BAD_INPUT
    assert "drop --config, or drop --live" in result.output


def test_with_no_broker_named_the_document_has_no_server_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no toolbus.toml naming one
    result = CliRunner().invoke(
        app, ["asyncapi", "--config", str(WORKFLOW)], env={"TOOLBUS_BROKER": None}
    )

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert "servers" not in document
    assert "no broker named" in result.stderr and "--broker URL" in result.stderr


def test_live_needs_a_broker_other_processes_reach(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    unnamed = CliRunner().invoke(app, ["asyncapi", "--live"], env={"TOOLBUS_BROKER": None})
    in_memory = run("--live", "--broker", "memory://")

    for result in (unnamed, in_memory):
        assert result.exit_code == EXIT_BAD_INPUT
        assert "--broker URL" in result.output


def test_verbose_is_taken_like_the_other_commands() -> None:
    result = run("--config", str(WORKFLOW), "-v")

    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["asyncapi"] == "3.0.0"


@pytest.mark.broker
def test_live_lists_no_tool_that_no_service_announced(
    live_nats: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example plugins are installed here, but nothing serves them on this broker."""
    monkeypatch.chdir(tmp_path)
    result = run("--live", "--broker", live_nats, "--wait", "0.3")

    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["operations"] == {} and document["channels"] == {}


def test_an_unknown_broker_scheme_is_named() -> None:
    result = run("--config", str(WORKFLOW), "--broker", "carrier-pigeon://coop")

    assert result.exit_code == EXIT_BAD_INPUT
    assert "carrier-pigeon" in result.output


@pytest.mark.slow
@needs_parser
def test_the_official_parser_finds_no_error_or_warning(tmp_path: Path) -> None:
    written = []
    for broker in [NATS, "kafka://127.0.0.1:9092", "pulsar://127.0.0.1:6650", "memory://"]:
        for output in ["json", "yaml"]:
            out = tmp_path / f"{broker.partition(':')[0]}.{output}"
            result = run(
                "--config", str(WORKFLOW), "-f", output, "--broker", broker, "-o", str(out)
            )
            assert result.exit_code == 0, result.output
            written.append(out)

    assert parser_problems(*written) == {out.name: [] for out in written}


@pytest.mark.anyio
@pytest.mark.broker
@pytest.mark.slow
async def test_live_describes_the_services_announcing_on_the_broker(
    live_nats: str, tmp_path: Path
) -> None:
    serve = [TOOLBUS, "serve", "joke-service", "--broker", live_nats]
    out = tmp_path / "live.json"
    async with started(serve, "announcing joke-service"):
        described = [TOOLBUS, "asyncapi", "--live", "--broker", live_nats, "-o", str(out)]
        # An empty configuration: only what is announced can be in the document.
        (tmp_path / "toolbus.toml").write_text("")
        result = await anyio.run_process([*described, "--wait", "3"], cwd=tmp_path, check=False)
    assert result.returncode == 0, result.stderr.decode()
    document = json.loads(out.read_text(encoding="utf-8"))

    assert schema_problems(document) == []
    assert document["operations"]["tell-joke"]["bindings"]["nats"]["queue"] == "joke-service"
    addresses = [c["address"] for c in document["channels"].values()]
    assert {"tg.request.joke", "tg.response.joke"} <= set(addresses)
