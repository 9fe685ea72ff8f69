"""What the gateway's front door adds to the API: refusals that reveal nothing, bounded
metrics, services as far as a caller reaches, limits per user, access control at start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, metric
from toolbus import Announcer
from toolbus.plugins import connect
from toolbus.testing.conformance import echo_service

pytestmark = pytest.mark.anyio


async def test_metrics_without_a_credential_name_no_tool_group_or_state(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        called = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "x"}})
        await http.post("/v1/tools/admin-reset/call", json={"arguments": {"text": "x"}})
        text = (await http.get("/metrics", headers={"Authorization": ""})).text
    assert called.status_code == 200
    assert metric(text, "toolbus_tool_calls_total", {"outcome": "ok"}) == 1
    assert metric(text, "agent_invalid_state_transition_total", {"reason": "group"}) == 1
    for name in ("echo", "admin-reset", "default", "undefined"):
        assert f'"{name}"' not in text


@pytest.mark.parametrize("gateway_settings", [{"max-body-bytes": 4 * 1024 * 1024}])
async def test_callers_choosing_huge_states_grow_neither_metrics_nor_answers(
    served: RunningGateway,
) -> None:
    async with served.client("alice") as http:
        before = len((await http.get("/metrics")).text)
        answers = [
            await http.post(
                "/v1/tools/echo/call",
                json={"state": f"{n}-" + "s" * 100_000, "arguments": {"text": "x"}},
            )
            for n in range(20)
        ]
        after = len((await http.get("/metrics")).text)
    assert {answer.status_code for answer in answers} == {403}
    assert {answer.json()["error"] for answer in answers} == {"state-refused"}
    assert max(len(answer.content) for answer in answers) < 2_000
    assert after - before < 2_000, "a refused state must not become a series"
    records = [r for r in served.gateway.audit.records if r.user == "alice"]
    assert len(records) == 20 and all(len(r.initial_state) <= 64 for r in records)


@pytest.mark.parametrize("gateway_settings", [{"metrics": "operators"}])
async def test_full_metrics_need_an_operator(served: RunningGateway) -> None:
    async with served.client() as anonymous, served.client("alice") as alice:
        unauthenticated = await anonymous.get("/metrics")
        not_operator = await alice.get("/metrics")
        await alice.post("/v1/tools/echo/call", json={"arguments": {"text": "x"}})
    async with served.client("ops") as ops:
        full = await ops.get("/metrics")
    assert unauthenticated.status_code == 401 and not_operator.status_code == 403
    assert full.status_code == 200
    assert metric(full.text, "toolbus_tool_calls_total", {"tool": "echo"}) == 0
    assert 'tool="echo"' in full.text


async def test_services_show_a_caller_only_what_its_groups_reach(
    served: RunningGateway, broker_url: str
) -> None:
    service = echo_service()
    admin_only = {"admin-echo": {"name": "admin-echo", "description": "d", "group": ["admin"]}}
    bus = await connect(broker_url)
    try:
        async with served.gateway.console.subscribe() as changes:
            await Announcer(bus, service, tools=admin_only).announce()
            with anyio.fail_after(10):
                assert (await changes.receive()).name == "services"
        async with served.client("alice") as alice, served.client("ops") as ops:
            mine = (await alice.get("/v1/services")).json()
            everything = (await ops.get("/v1/services")).json()
    finally:
        await bus.close()
    assert service.id not in {s["service"] for s in mine["live"]}
    assert "admin-echo" not in mine["announced_tools"]
    assert service.id in {s["service"] for s in everything["live"]}
    assert "admin-echo" in everything["announced_tools"]


@pytest.mark.parametrize("door_settings", [{"max-streams-per-user": 1}])
async def test_event_streams_are_limited_per_user(served: RunningGateway) -> None:
    async with served.client("alice") as alice, served.client("bob") as bob:
        sid = (await alice.post("/v1/sessions", json={})).json()["session_id"]
        async with alice.stream("GET", f"/v1/sessions/{sid}/events") as first:
            assert first.status_code == 200
            second = await alice.get(f"/v1/sessions/{sid}/events")
            bobs = (await bob.post("/v1/sessions", json={})).json()["session_id"]
            async with bob.stream("GET", f"/v1/sessions/{bobs}/events") as others:
                assert others.status_code == 200
    assert second.status_code == 429 and second.json()["error"] == "too-many-streams"
    assert int(second.headers["retry-after"]) >= 1


# ------------------------------------------------------------------ access control at start

KEYS = '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'


def _start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    (tmp_path / "toolbus.toml").write_text(KEYS)
    (tmp_path / "tools.json").write_text('{"tool-service": {}, "tool": {}}')
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    toolbus = str(Path(sys.executable).parent / "toolbus")
    # Port 0: the system chooses one as the gateway binds.
    argv = [toolbus, "gateway", "--config", "tools.json", "--listen", "127.0.0.1:0", *args]
    return subprocess.Popen(
        argv,
        cwd=tmp_path,
        env={**env, "ALICE_KEY": "k" * 20},
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_without_permissions_the_gateway_refuses_to_start(tmp_path: Path) -> None:
    process = _start(tmp_path)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 2
    assert "access control is not configured" in stderr and "--no-access-control" in stderr


@pytest.mark.slow
def test_no_access_control_starts_and_says_so(tmp_path: Path) -> None:
    process = _start(tmp_path, "--no-access-control")
    try:
        assert process.stderr is not None
        said: list[Any] = []
        for line in process.stderr:  # the process says it at start, before it serves
            said.append(line)
            if "access control is OFF" in line:
                break
    finally:
        process.terminate()
        process.wait(timeout=30)
    assert any("every caller may use every tool" in line for line in said), said
