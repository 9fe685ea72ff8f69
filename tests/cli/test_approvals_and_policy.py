"""``toolbus approvals list|approve|deny`` on a real shared store (Debian's redis-server),
and ``toolbus policy check``: a bad policy exits 2 naming its file and line."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

import toolbus.cli
from tests.redis.server import RedisServer
from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.sealing import load_seal_keys, new_seal_jwk, sealed
from toolbus.cli import app
from toolbus.cli._door_state import API_KEY_ENV
from toolbus.domain.access.approvals import Approval
from toolbus.plugins import connect_state


@pytest.fixture(scope="module")
def redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis-approvals"))
    with server.running():
        yield server


OPS_KEY = "ops-key-0123456789abcdef"
ALICE_KEY = "alice-key-0123456789abcdef"


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    toolbus.cli.assemble()
    monkeypatch.chdir(tmp_path)
    for name in ("TOOLBUS_BROKER", "TOOLBUS_CONFIG", "TOOLBUS_STATE", "TOOLBUS_SEAL_KEYS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    return tmp_path


@pytest.fixture
def shared(scratch: Path, redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A toolbus.toml naming the store, the doors' seal key and the approvers' API keys."""
    url = f"{redis.url}/0?prefix=cli-{uuid.uuid4().hex[:8]}"
    (scratch / "seal.jwk").write_text(json.dumps(new_seal_jwk("seal-cli")))
    (scratch / "toolbus.toml").write_text(
        f'state = "{url}"\n'
        'seal-keys = ["seal.jwk"]\n\n'
        '[[credentials.api-keys]]\nuser = "ops"\nenv = "OPS_KEY"\n\n'
        '[[credentials.api-keys]]\nuser = "alice"\nenv = "ALICE_KEY"\n'
    )
    monkeypatch.setenv("OPS_KEY", OPS_KEY)
    monkeypatch.setenv("ALICE_KEY", ALICE_KEY)
    return url


def cli(*args: str, key: str | None = None) -> Result:
    env = {} if key is None else {API_KEY_ENV: key}
    return CliRunner().invoke(app, list(args), env=env)


@asynccontextmanager
async def book(url: str, directory: Path) -> AsyncIterator[ApprovalBook]:
    """The approvals as a door keeps them: in the shared store, sealed with the doors' key."""
    store = await connect_state(url)
    try:
        yield ApprovalBook(sealed(store, load_seal_keys(["seal.jwk"], base_dir=directory)))
    finally:
        await store.close()


def waiting(url: str, directory: Path, **fields: object) -> Approval:
    now = time.time()
    approval = Approval.model_validate(
        {
            "id": uuid.uuid4().hex,
            "user": "alice",
            "tool": "refund",
            "arguments": {"amount": 40, "api_key": "[redacted]"},
            "approvers": ["ops", "alice"],
            "reason": "[approvals] tools lists refund",
            "request_id": "r-1",
            "created_at": now,
            "expires_at": now + 300,
            **fields,
        }
    )

    async def add() -> Approval:
        async with book(url, directory) as approvals:
            return await approvals.add(approval)

    return anyio.run(add)


def stored(url: str, directory: Path, approval_id: str) -> Approval | None:
    async def get() -> Approval | None:
        async with book(url, directory) as approvals:
            return await approvals.get(approval_id)

    return anyio.run(get)


def test_list_approve_and_deny_from_the_command_line(scratch: Path, shared: str) -> None:
    first = waiting(shared, scratch)
    second = waiting(shared, scratch)

    listed = cli("approvals", "list", "--json", key=OPS_KEY)
    assert listed.exit_code == 0, listed.output
    ids = [json.loads(line)["id"] for line in listed.stdout.splitlines()]
    assert first.id in ids and second.id in ids
    assert "[redacted]" in listed.stdout

    # alice is among the approvers, but it is her own call.
    refused = cli("approvals", "approve", first.id, key=ALICE_KEY)
    assert refused.exit_code == 2
    assert "their own call" in refused.output

    approved = cli("approvals", "approve", first.id, key=OPS_KEY)
    denied = cli("approvals", "deny", second.id, "--note", "no", key=OPS_KEY)
    assert approved.exit_code == 0 and denied.exit_code == 0, approved.output + denied.output
    assert "approved by ops" in approved.stdout
    a, b = stored(shared, scratch, first.id), stored(shared, scratch, second.id)
    assert a is not None and (a.status, a.decided_by, a.decided_via) == (
        "approved",
        "ops",
        "cli (api-key)",
    )
    assert b is not None and (b.status, b.decided_by, b.note) == ("denied", "ops", "no")

    again = cli("approvals", "deny", first.id, key=OPS_KEY)
    assert again.exit_code == 2  # decided already


def test_an_approver_proves_who_they_are(scratch: Path, shared: str) -> None:
    pending = waiting(shared, scratch)
    claimed = cli("approvals", "approve", pending.id, "--user", "ops")
    assert claimed.exit_code == 2 and "--user" in claimed.output  # no such option any more
    unproven = cli("approvals", "approve", pending.id)
    assert unproven.exit_code == 2 and API_KEY_ENV in unproven.output
    wrong = cli("approvals", "approve", pending.id, key="not-a-key-0123456789")
    assert wrong.exit_code == 2 and "is not an API key" in wrong.output
    still = stored(shared, scratch, pending.id)
    assert still is not None and still.status == "pending"


def test_an_approval_written_into_the_store_by_hand_does_not_exist(
    scratch: Path, shared: str
) -> None:
    forged = waiting(shared, scratch).model_copy(update={"id": uuid.uuid4().hex})

    async def write() -> None:
        store = await connect_state(shared)  # no seal key: anyone who reaches the store
        try:
            await store.put("approvals", forged.id, forged.to_json())
        finally:
            await store.close()

    anyio.run(write)
    result = cli("approvals", "approve", forged.id, key=OPS_KEY)
    assert result.exit_code == 2 and "no approval" in result.output.lower(), result.output


def test_a_shared_store_without_a_seal_key_is_refused(scratch: Path, redis: RedisServer) -> None:
    (scratch / "toolbus.toml").write_text(f'state = "{redis.url}/0"\n')
    result = cli("approvals", "list", key=OPS_KEY)
    assert result.exit_code == 2
    assert "seal-keys" in result.output and "toolbus keys new" in result.output


def test_an_approval_is_named_by_any_unique_beginning_of_its_id(scratch: Path, shared: str) -> None:
    common = uuid.uuid4().hex[:8]
    # As the door names the approvals of one call asked for again: the digest, then more.
    first = waiting(shared, scratch, id=f"{common}{uuid.uuid4().hex[8:]}")
    second = waiting(shared, scratch, id=f"{first.id}-{uuid.uuid4().hex}")
    assert len(second.id) == 65

    ambiguous = cli("approvals", "approve", common, key=OPS_KEY)
    assert ambiguous.exit_code == 2
    assert first.id in ambiguous.output and second.id in ambiguous.output
    assert "give more of the id" in ambiguous.output

    too_short = cli("approvals", "approve", common[:3], key=OPS_KEY)
    assert too_short.exit_code == 2 and "no approval" in too_short.output

    # The whole id of the first is also the beginning of the second's: the id itself wins.
    exact = cli("approvals", "approve", first.id, key=OPS_KEY)
    unique = cli("approvals", "deny", second.id[:40], key=OPS_KEY)
    assert exact.exit_code == 0 and unique.exit_code == 0, exact.output + unique.output
    a, b = stored(shared, scratch, first.id), stored(shared, scratch, second.id)
    assert a is not None and a.status == "approved"
    assert b is not None and b.status == "denied"

    unknown = cli("approvals", "deny", "0123456789", key=OPS_KEY)
    assert unknown.exit_code == 2 and "no approval" in unknown.output


def test_approvals_need_a_shared_store(scratch: Path) -> None:
    result = cli("approvals", "list", key=OPS_KEY)
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


def test_policy_check_names_a_misspelt_argument_under_a_has_guard(scratch: Path) -> None:
    """`has` on an argument no tool declares is never true: Cedar checks nothing behind it,
    so a typo would quietly turn the forbid off."""
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
