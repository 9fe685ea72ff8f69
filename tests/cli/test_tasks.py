"""``toolbus tasks list|show|cancel`` and ``toolbus call --async`` on a real shared store
(Debian's redis-server), sealed as the doors seal it."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

from tests.cli import test_approvals_and_policy as approvals_cli
from tests.cli.test_approvals_and_policy import ALICE_KEY, OPS_KEY, cli, stored, waiting
from toolbus.application.doors.tasks import CLI_DOOR, call_task
from toolbus.application.sealing import load_seal_keys, sealed
from toolbus.application.tasks import TaskBook
from toolbus.cli import app
from toolbus.cli._door_state import API_KEY_ENV
from toolbus.domain.tasks import Task
from toolbus.plugins import connect_state

BOB_KEY = "bob-key-0123456789abcdef"

# The store and the scratch folder are the approvals commands' fixtures.
redis = approvals_cli.redis
scratch = approvals_cli.scratch
shared = approvals_cli.shared


@asynccontextmanager
async def tasks(url: str, directory: Path) -> AsyncIterator[TaskBook]:
    """The tasks as a door keeps them: in the shared store, sealed with the doors' key."""
    store = await connect_state(url)
    try:
        yield TaskBook(sealed(store, load_seal_keys(["seal.jwk"], base_dir=directory)))
    finally:
        await store.close()


def a_task(url: str, directory: Path, owner: str = "alice", **fields: object) -> Task:
    task = call_task(
        door="gateway",
        owner=owner,
        tool="refund",
        groups=["default"],
        state="undefined",
        request_id="r-1",
        arguments={"amount": 40},
        ttl=600,
    ).model_copy(update=fields)

    async def create() -> Task:
        async with tasks(url, directory) as book:
            return await book.create(task)

    return anyio.run(create)


def read(url: str, directory: Path, task_id: str) -> Task | None:
    async def get() -> Task | None:
        async with tasks(url, directory) as book:
            return await book.get(task_id)

    return anyio.run(get)


@pytest.fixture
def with_bob(shared: str, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """bob, a caller who is not an operator; ops is one (console-users)."""
    toml = scratch / "toolbus.toml"
    toml.write_text(
        toml.read_text()
        + '\n[[credentials.api-keys]]\nuser = "bob"\nenv = "BOB_KEY"\n'
        + '\n[gateway]\nconsole-users = ["ops"]\n'
    )
    monkeypatch.setenv("BOB_KEY", BOB_KEY)
    return shared


def test_list_and_show_are_the_callers_own_and_an_operators(scratch: Path, with_bob: str) -> None:
    done = a_task(with_bob, scratch, status="completed", result="refunded 40 EUR", call=None)
    theirs = a_task(with_bob, scratch, owner="carol")

    listed = cli("tasks", "list", "--json", key=ALICE_KEY)
    assert listed.exit_code == 0, listed.output
    assert [json.loads(line)["id"] for line in listed.stdout.splitlines()] == [done.id]
    shown = cli("tasks", "show", done.id, key=ALICE_KEY)
    assert shown.exit_code == 0, shown.output
    assert "completed" in shown.stdout and "refunded 40 EUR" in shown.stdout
    assert '"call"' not in cli("tasks", "show", done.id, "--json", key=ALICE_KEY).stdout

    # Another's task does not exist for bob; an operator sees it.
    for command in (["show", theirs.id], ["cancel", theirs.id]):
        refused = cli("tasks", *command, key=BOB_KEY)
        assert refused.exit_code == 2 and f"no task {theirs.id!r} for you" in refused.output
    assert cli("tasks", "show", theirs.id, key=OPS_KEY).exit_code == 0
    assert cli("tasks", "list", key=BOB_KEY).stdout.strip() == "You have no task."


def test_cancel_withdraws_the_approval_and_deciding_it_says_so(
    scratch: Path, with_bob: str
) -> None:
    approval = waiting(with_bob, scratch)
    task = a_task(
        with_bob,
        scratch,
        status="input-required",
        approval_id=approval.id,
        message="waiting for approval by ops",
    )

    cancelled = cli("tasks", "cancel", task.id, key=ALICE_KEY)
    assert cancelled.exit_code == 0, cancelled.output
    after = read(with_bob, scratch, task.id)
    assert after is not None and after.status == "cancelled"
    assert after.message == "cancelled by alice"
    withdrawn = stored(with_bob, scratch, approval.id)
    assert withdrawn is not None and withdrawn.status == "withdrawn"

    approve = cli("approvals", "approve", approval.id, key=OPS_KEY)
    assert approve.exit_code == 2
    assert "withdrawn" in approve.output and "will not be made" in approve.output
    again = cli("tasks", "cancel", task.id, key=ALICE_KEY)
    assert again.exit_code == 2 and "cancelled already" in again.output


def test_call_async_writes_a_task_for_a_door_to_make(scratch: Path, with_bob: str) -> None:
    started = cli("call", "refund", "--async", "-a", "amount=40", "-g", "default", key=BOB_KEY)
    assert started.exit_code == 0, started.output
    task_id = started.stdout.strip()
    task = read(with_bob, scratch, task_id)
    assert task is not None and task.call is not None
    assert (task.owner, task.door, task.status, task.tool) == ("bob", CLI_DOOR, "working", "refund")
    assert task.call.arguments == {"amount": 40} and task.call.groups == ("default",)
    # Nobody answers for it yet: the first door replica to look takes it.
    assert task.orphaned(time.time())


@pytest.mark.parametrize(
    ("toml", "extra", "message"),
    [
        ("", [], "--async needs the state store the doors share"),
        ('state = "memory://mine"\n', [], "lives in this command's own memory"),
        (None, ["--user", "mallory"], "--user, --sign-key and --stream do not apply"),
    ],
)
def test_call_async_refuses_what_cannot_work(
    scratch: Path, with_bob: str, toml: str | None, extra: list[str], message: str
) -> None:
    if toml is not None:
        (scratch / "toolbus.toml").write_text(toml)
    refused = cli("call", "refund", "--async", *extra, key=BOB_KEY)
    assert refused.exit_code == 2, refused.output
    assert message in refused.output


SURE = {"type": "object", "properties": {"sure": {"type": "boolean"}}, "required": ["sure"]}
ASKING = {
    "status": "input-required",
    "message": "waiting for the caller's answers to what the tool asks",
    "input_requests": {
        "elicitation-1": {
            "method": "elicitation/create",
            "params": {"message": "Refund 40 EUR?", "requestedSchema": SURE},
        }
    },
}


def test_answer_gives_a_tasks_owner_answers_checked_against_its_questions(
    scratch: Path, with_bob: str
) -> None:
    task = a_task(with_bob, scratch, **ASKING)
    shown = cli("tasks", "show", task.id, key=ALICE_KEY)
    yes = '{"elicitation-1": {"action": "accept", "content": {"sure": true}}}'

    foreign = cli("tasks", "answer", task.id, "--responses", yes, key=BOB_KEY)
    not_json = cli("tasks", "answer", task.id, "--responses", "{yes", key=ALICE_KEY)
    unfit = cli(
        "tasks",
        "answer",
        task.id,
        "--responses",
        '{"elicitation-1": {"action": "accept"}}',
        key=ALICE_KEY,
    )
    untouched = read(with_bob, scratch, task.id)
    answered = cli("tasks", "answer", task.id, "--responses", yes, key=ALICE_KEY)
    after = read(with_bob, scratch, task.id)
    again = cli("tasks", "answer", task.id, "--responses", yes, key=ALICE_KEY)

    assert (
        shown.exit_code == 0 and 'asks elicitation-1: elicitation "Refund 40 EUR?"' in shown.stdout
    )
    assert foreign.exit_code == 2 and f"no task {task.id!r} for you" in foreign.output
    assert not_json.exit_code == 2 and "--responses is not JSON" in not_json.output
    assert unfit.exit_code == 2
    assert "responses['elicitation-1'].content: the form requires 'sure'" in unfit.output
    assert untouched is not None and untouched.input_requests == ASKING["input_requests"]
    assert answered.exit_code == 0, answered.output
    assert f"answered; task {task.id} goes on" in answered.stdout
    assert after is not None and after.input_requests == {}
    assert after.call is not None
    assert after.call.input_responses == {
        "elicitation-1": {"action": "accept", "content": {"sure": True}}
    }
    assert again.exit_code == 2 and "asks nothing now" in again.output


def test_answer_asks_each_question_at_the_terminal(scratch: Path, with_bob: str) -> None:
    task = a_task(with_bob, scratch, **ASKING)

    answered = CliRunner().invoke(
        app, ["tasks", "answer", task.id], env={API_KEY_ENV: ALICE_KEY}, input="accept\ny\n"
    )

    assert answered.exit_code == 0, answered.output
    assert "Refund 40 EUR?" in answered.output
    after = read(with_bob, scratch, task.id)
    assert after is not None and after.call is not None
    assert after.call.input_responses == {
        "elicitation-1": {"action": "accept", "content": {"sure": True}}
    }
