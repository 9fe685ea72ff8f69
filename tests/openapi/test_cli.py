"""``toolbus serve openapi`` as a real process, flags and toolbus.toml, on a real NATS server."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from tests.cli.test_serve_process import STARTUP, WAIT, ServeProcess
from tests.nats.conftest import nats_server  # noqa: F401  (the session's NATS server)
from tests.nats.server import NatsServer
from tests.openapi.conftest import Api
from toolbus import ToolServiceClient
from toolbus.cli import app, assemble
from toolbus.plugins import connect


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("TOOLBUS_", "SHOP_"))}


@pytest.fixture
def processes() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for process in started:
        process.kill()


def in_process(*args: str, cwd: Path, monkeypatch: pytest.MonkeyPatch) -> Result:
    """A command run in this process (quicker than a fresh interpreter), in ``cwd``."""
    monkeypatch.chdir(cwd)
    for name in [name for name in os.environ if name.startswith(("TOOLBUS_", "SHOP_"))]:
        monkeypatch.delenv(name)
    assemble()
    return CliRunner().invoke(app, list(args))


def test_list_tools_shows_what_would_be_served(
    shop: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = in_process(
        "serve", "openapi", "--toolset", "shop", "--spec", shop.spec_url,
        "--allow-insecure-spec",
        "--include", "items", "--exclude", "createItem", "--list-tools",
        cwd=tmp_path, monkeypatch=monkeypatch,
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert result.output == (
        f"shop -> {shop.url}/api\n"
        "  shop_listItems: GET /items\n"
        "  shop_getItem: GET /items/{item_id}\n"
    )


def test_bad_flags_and_documents_are_refused_with_every_problem(
    shop: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "bad.yaml").write_text("openapi: 3.0.0\npaths: [\n", encoding="utf-8")

    def run(*args: str) -> Result:
        return in_process("serve", "openapi", *args, cwd=tmp_path, monkeypatch=monkeypatch)

    bad_doc = run("--toolset", "x", "--spec", "bad.yaml")
    bad_flags = run(
        "--toolset", "shop", "--spec", shop.spec_url, "--allow-insecure-spec",
        "--bearer-env", "not a name", "--header-env", "X-Key",
    )  # fmt: skip
    unset = run(
        "--toolset", "shop", "--spec", shop.spec_url, "--allow-insecure-spec",
        "--base-url", f"{shop.url}/api", "--bearer-env", "SHOP_TOKEN", "--include", "nothing",
    )  # fmt: skip
    nothing = run()
    unsigned = run("--toolset", "shop", "--spec", shop.spec_url, "--allow-unsigned")

    assert bad_doc.exit_code == 2
    assert "bad.yaml: is not valid YAML" in bad_doc.output
    assert bad_flags.exit_code == 2
    assert "2 problems" in bad_flags.output
    assert "'not a name' is not an environment variable name" in bad_flags.output
    assert "--header-env 'X-Key': must be NAME=VARIABLE" in bad_flags.output
    assert unset.exit_code == 2
    assert "2 problems" in unset.output
    assert "SHOP_TOKEN (bearer token from $SHOP_TOKEN) is not set" in unset.output
    assert "--include 'nothing' names no operationId or tag" in unset.output
    assert nothing.exit_code == 2
    assert "no toolset to serve" in nothing.output
    assert unsigned.exit_code == 2
    assert "--allow-unsigned relaxes --verify-key" in unsigned.output


@pytest.mark.broker
@pytest.mark.anyio
async def test_serve_openapi_announces_and_answers_over_nats_until_sigterm(
    nats_server: NatsServer,  # noqa: F811
    shop: Api,
    tmp_path: Path,
    env: dict[str, str],
    processes: list[ServeProcess],
) -> None:
    # Everything from toolbus.toml; the secret from the service's environment only.
    (tmp_path / "toolbus.toml").write_text(
        f'broker = "{nats_server.url}"\n'
        "[openapi.toolsets.shop]\n"
        f'spec = "{shop.spec_url}"\n'
        "allow-insecure-spec = true\n"
        f'base-url = "{shop.url}/api"\n'
        'exclude = ["slow"]\n'
        'bearer-env = "SHOP_TOKEN"\n',
        encoding="utf-8",
    )
    process = ServeProcess(["openapi"], {**env, "SHOP_TOKEN": shop.secret}, tmp_path)
    processes.append(process)

    serving = process.wait_for_line("serving shop ", STARTUP)
    announcing = process.wait_for_line("announcing shop ", WAIT)
    bus = await connect(nats_server.url)
    try:
        async with ToolServiceClient(bus) as client:
            answer = await client.call(
                request_queue="non-persistent://tg/request/shop",
                response_queue="non-persistent://tg/response/shop",
                config={"operation": "whoAmI"},
                timeout=10,
            )
    finally:
        await bus.close()
    process.process.send_signal(signal.SIGTERM)

    assert process.process.wait(timeout=WAIT) == 0
    assert serving == f"serving shop on non-persistent://tg/request/shop via {nats_server.url}"
    assert "shop_getItem" in announcing and "shop_slow" not in announcing
    assert json.loads(answer) == {"user": "alice", "credential": "***"}
    assert not any(shop.secret in line for line in process.seen + process.rest(WAIT))


def test_toolbus_toml_toolsets_are_plugin_services_for_every_command(
    shop: Api, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "toolbus.toml").write_text(
        f'[openapi.toolsets.shop]\nspec = "{shop.spec_url}"\nallow-insecure-spec = true\n'
        'include = ["getItem"]\n',
        encoding="utf-8",
    )

    called = in_process(
        "call", "shop_getItem", "--arg", "item_id=5", cwd=tmp_path, monkeypatch=monkeypatch
    )
    plugins = in_process("plugins", cwd=tmp_path, monkeypatch=monkeypatch)

    assert called.exit_code == 0, called.output
    assert json.loads(called.output)["id"] == "5"
    assert plugins.output.count("toolbus-openapi 0.1.0") == 2, plugins.output  # tools, commands
