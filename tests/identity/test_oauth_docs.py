"""The "Logging in" sections of docs/gateway.md and docs/mcp.md: their ``toolbus.toml``
start the doors (a real provider standing in for Keycloak at its issuer), and the
gateway's curl examples print what the page says."""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio
import httpx
import pytest

from tests.doors.processes import LISTEN, door_process
from tests.support.doc_examples import DOCS
from tests.support.oidc import needs_oidc_provider, oidc_provider

pytestmark = [pytest.mark.anyio, pytest.mark.slow, needs_oidc_provider]

BLOCK = re.compile(
    r"<!-- oauth-doc: (?P<name>\S+) -->\n```\w+\n(?P<code>.*?)```\n"
    r"(?:\n```text\n(?P<output>.*?)```)?",
    re.S,
)
DOC_ISSUER = "https://keycloak.example/realms/tools"
DOC_LISTEN = "127.0.0.1:8080"
#: Where the doors listen instead: a port the system chooses, which they name.
ANY_PORT = "127.0.0.1:0"


def blocks(page: str) -> dict[str, re.Match[str]]:
    return {m["name"]: m for m in BLOCK.finditer((DOCS / page).read_text(encoding="utf-8"))}


def write_door(workdir: Path, settings: str) -> None:
    workdir.mkdir()
    (workdir / "toolbus.toml").write_text(settings)
    (workdir / "tools.json").write_text(json.dumps({"tool-service": {}, "tool": {}}))


async def test_the_gateway_s_example_serves_what_the_page_shows(tmp_path: Path) -> None:
    page = blocks("gateway.md")
    with oidc_provider(tmp_path / "idp") as idp:
        settings = page["gateway.toml"]["code"].replace(DOC_ISSUER, idp.issuer)
        write_door(tmp_path / "gateway", settings.replace(DOC_LISTEN, ANY_PORT))
        argv = ["gateway", "--config", "tools.json"]
        async with door_process(argv, cwd=tmp_path / "gateway", environment={}, http=True) as door:
            listen = f"127.0.0.1:{door.port}"
            run = page["gateway-run"]
            # A newline after each command: curl's output may not end with one.
            commands = run["code"].replace(DOC_LISTEN, listen).strip().splitlines()
            script = "\n".join(["set -euo pipefail", *(f"{c}\necho" for c in commands)])
            with anyio.fail_after(60):
                result = await anyio.run_process(["bash", "-c", script], check=False)
    assert result.returncode == 0, result.stderr.decode()
    printed = [line.rstrip() for line in result.stdout.decode().splitlines() if line.strip()]
    expected = run["output"].replace(DOC_ISSUER, idp.issuer).strip("\n").splitlines()
    assert printed == expected


async def test_the_mcp_door_s_example_tells_clients_how_to_log_in(tmp_path: Path) -> None:
    with oidc_provider(tmp_path / "idp") as idp:
        settings = blocks("mcp.md")["mcp.toml"]["code"].replace(DOC_ISSUER, idp.issuer)
        write_door(tmp_path / "mcp", settings)
        argv = ["mcp", "serve", "--transport", "http", "--config", "tools.json", *LISTEN]
        async with (
            door_process(argv, cwd=tmp_path / "mcp", environment={}, http=True) as door,
            httpx.AsyncClient() as http,
        ):
            listen = f"127.0.0.1:{door.port}"
            refused = await http.post(f"http://{listen}/mcp", json={})
            metadata = await http.get(f"http://{listen}/.well-known/oauth-protected-resource/mcp")
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == (
        'Bearer realm="toolbus", resource_metadata='
        '"https://tools.example/.well-known/oauth-protected-resource/mcp", scope="tools:read"'
    )
    assert metadata.json()["authorization_servers"] == [idp.issuer]
    assert metadata.json()["resource"] == "https://tools.example/mcp"
