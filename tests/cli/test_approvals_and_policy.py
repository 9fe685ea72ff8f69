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
    pytest.importorskip("toolbus_redis")
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


def test_an_approval_is_named_by_any_unique_beginning_of_its_id(
    scratch: Path, redis: RedisServer
) -> None:
    shared = uuid.uuid4().hex[:8]
    # As the door names the approvals of one call asked for again: the digest, then more.
    first = waiting(redis.url, id=f"{shared}{uuid.uuid4().hex[8:]}")
    second = waiting(redis.url, id=f"{first.id}-{uuid.uuid4().hex}")
    assert len(second.id) == 65

    ambiguous = cli("approvals", "approve", shared, "--user", "ops", "--state", redis.url)
    assert ambiguous.exit_code == 2
    assert first.id in ambiguous.output and second.id in ambiguous.output
    assert "give more of the id" in ambiguous.output

    too_short = cli("approvals", "approve", shared[:3], "--user", "ops", "--state", redis.url)
    assert too_short.exit_code == 2 and "no approval" in too_short.output

    # The whole id of the first is also the beginning of the second's: the id itself wins.
    exact = cli("approvals", "approve", first.id, "--user", "ops", "--state", redis.url)
    unique = cli("approvals", "deny", second.id[:40], "--user", "ops", "--state", redis.url)
    assert exact.exit_code == 0 and unique.exit_code == 0, exact.output + unique.output
    a, b = stored(redis.url, first.id), stored(redis.url, second.id)
    assert a is not None and a.status == "approved"
    assert b is not None and b.status == "denied"

    unknown = cli("approvals", "deny", "0123456789", "--user", "ops", "--state", redis.url)
    assert unknown.exit_code == 2 and "no approval" in unknown.output


def test_approvals_need_a_shared_store(scratch: Path) -> None:
    result = cli("approvals", "list")
    assert result.exit_code == 2
    assert "state" in result.output


def test_policy_check_names_the_file_and_line_of_a_bad_policy(scratch: Path) -> None:
    pytest.importorskip("toolbus_cedar")
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


def test_policy_check_names_a_misspelt_argument_under_a_has_guard(scratch: Path) -> None:
    """`has` on an argument no tool declares is never true: Cedar checks nothing behind it,
    so a typo would quietly turn the forbid off."""
    pytest.importorskip("toolbus_cedar")
    config = {
        "tool": {
            "weather": {
                "type": "tool-service",
                "name": "weather",
                "description": "weather",
                "service": "weather",
                "arguments": [{"name": "city", "type": "string", "description": "a city"}],
            }
        },
        "tool-service": {"weather": {"request-queue": "w-req", "response-queue": "w-resp"}},
    }
    (scratch / "config.json").write_text(json.dumps(config))
    (scratch / "toolbus.toml").write_text(
        'config = "config.json"\n[policy]\nfiles = ["calls.cedar"]\n'
    )
    policies = (
        "permit(principal, action, resource);\n\n"
        "forbid(principal, action, resource)\n"
        'when { context.arguments has city && context.arguments.city == "Paris" };\n\n'
        "forbid(principal, action, resource)\n"
        'when { context.arguments has {name} && context.arguments.{name} == "Boston" };\n'
    )
    (scratch / "calls.cedar").write_text(policies.replace("{name}", "ctiy"))

    bad = cli("policy", "check")
    assert bad.exit_code == 2, bad.output
    assert "calls.cedar, line 6" in bad.output, bad.output
    assert "'ctiy'" in bad.output and "city" in bad.output  # the name, and the ones there are
    assert bad.output.count("calls.cedar, line") == 1  # the well-spelt policy is fine

    (scratch / "calls.cedar").write_text(policies.replace("{name}", "city"))
    good = cli("policy", "check")
    assert good.exit_code == 0, good.output
    assert "ok: 3 policies" in good.output


def test_policy_check_names_the_line_of_a_policy_after_annotated_ones(scratch: Path) -> None:
    """Each policy's line is where it starts, its annotations included, however many
    annotated policies come before it."""
    pytest.importorskip("toolbus_cedar")
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
    (scratch / "toolbus.toml").write_text(
        'config = "config.json"\n[policy]\nfiles = ["calls.cedar"]\n'
    )
    (scratch / "calls.cedar").write_text(
        "permit(principal, action, resource);\n"  # 1
        "\n"
        '@id("small")\n'  # 3
        '@reason("small refunds only")\n'
        "forbid(principal, action, resource)\n"
        "when { context.arguments has amount && context.arguments.amount > 100 };\n"
        "\n"
        '@reason("a typo")\n'  # 8
        "forbid(principal, action, resource)\n"
        "when { context.arguments has amuont && context.arguments.amuont > 5 };\n"
    )

    bad = cli("policy", "check")
    assert bad.exit_code == 2
    assert "calls.cedar, line 8" in bad.output, bad.output
