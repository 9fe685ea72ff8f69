"""``toolbus approvals list|approve|deny`` on a real shared store (Debian's redis-server),
and ``toolbus policy check``: a bad policy exits 2 naming its file and line."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

import toolbus.cli
from tests.redis.server import RedisServer
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.cli import app
from toolbus.domain.access.approvals import Approval
from toolbus.plugins import connect_state


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-approvals"))
    with server.running():
        yield server


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    toolbus.cli.assemble()
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_STATE"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def cli(*args: str) -> Result:
    return CliRunner().invoke(app, list(args))


def waiting(url: str, **fields: object) -> Approval:
    """An approval as a door keeps one: in the shared store."""
    now = time.time()
    approval = Approval.model_validate(
        {
            "id": uuid.uuid4().hex,
            "user": "alice",
            "tool": "refund",
            "arguments": {"amount": 40, "api_key": "[redacted]"},
            "approvers": ["ops"],
            "reason": "[approvals] tools lists refund",
            "request_id": "r-1",
            "created_at": now,
            "expires_at": now + 300,
            **fields,
        }
    )

    async def add() -> Approval:
        store = await connect_state(url)
        try:
            return await ApprovalBook(store).add(approval)
        finally:
            await store.close()

    return anyio.run(add)


def stored(url: str, approval_id: str) -> Approval | None:
    async def get() -> Approval | None:
        store = await connect_state(url)
        try:
            return await ApprovalBook(store).get(approval_id)
        finally:
            await store.close()

    return anyio.run(get)


def test_list_approve_and_deny_from_the_command_line(scratch: Path, redis: RedisServer) -> None:
    first = waiting(redis.url)
    second = waiting(redis.url)

    listed = cli("approvals", "list", "--state", redis.url, "--json")
    assert listed.exit_code == 0, listed.output
    ids = [json.loads(line)["id"] for line in listed.stdout.splitlines()]
    assert first.id in ids and second.id in ids
    assert "[redacted]" in listed.stdout

    refused = cli("approvals", "approve", first.id, "--user", "alice", "--state", redis.url)
    assert refused.exit_code == 2
    assert "alice" in refused.output

    approved = cli("approvals", "approve", first.id, "--user", "ops", "--state", redis.url)
    denied = cli(
        "approvals", "deny", second.id, "--user", "ops", "--note", "no", "--state", redis.url
    )
    assert approved.exit_code == 0 and denied.exit_code == 0, approved.output + denied.output
    a, b = stored(redis.url, first.id), stored(redis.url, second.id)
    assert a is not None and (a.status, a.decided_by) == ("approved", "ops")
    assert b is not None and (b.status, b.decided_by, b.note) == ("denied", "ops", "no")

    again = cli("approvals", "deny", first.id, "--user", "ops", "--state", redis.url)
    assert again.exit_code == 2  # decided already


def test_approvals_need_a_shared_store(scratch: Path) -> None:
    result = cli("approvals", "list")
    assert result.exit_code == 2
    assert "state" in result.output


def test_policy_check_names_the_file_and_line_of_a_bad_policy(scratch: Path) -> None:
    config = {
        "tool": {
            "refund": {
                "type": "tool-service",
                "name": "refund",
                "description": "refund",
                "service": "shop",
                "arguments": [{"name": "amount", "type": "integer", "description": "amount"}],
            }
        },
        "tool-service": {"shop": {"request-queue": "shop-req", "response-queue": "shop-resp"}},
    }
    (scratch / "config.json").write_text(json.dumps(config))
    (scratch / "calls.cedar").write_text(
        "permit(principal, action, resource);\n\nforbid(principal, action, resource)\n"
        'when { context.arguments.amount > "ten" };\n'
    )
    (scratch / "toolbus.toml").write_text(
        'config = "config.json"\n[policy]\nfiles = ["calls.cedar"]\n'
    )

    bad = cli("policy", "check")
    assert bad.exit_code == 2
    assert "calls.cedar, line 3" in bad.output, bad.output
    assert "compare values of one type" in bad.output  # the fix, for the string
    assert "context.arguments has amount" in bad.output  # and for the optional argument

    (scratch / "calls.cedar").write_text(
        "permit(principal, action, resource);\n"
        "forbid(principal, action, resource)\n"
        "when { context.arguments has amount && context.arguments.amount > 10 };\n"
    )
    good = cli("policy", "check")
    assert good.exit_code == 0, good.output
