"""``toolbus approvals list|approve|deny``: calls waiting for a person, from the command line.

Approvals wait in the state store the doors share (``state`` in
``toolbus.toml``, or ``TOOLBUS_STATE``), sealed with the doors' seal keys
(``seal-keys``); these commands read and write it with the same keys, so a
decision reaches the waiting call on whichever replica of whichever door holds
it. The approver proves who they are like every other client: with their API
key (``TOOLBUS_API_KEY``), checked against ``[credentials]`` in ``toolbus.toml``,
never a name given on the command line. A JWT is checked by the gateway: decide
with its API (``POST /v1/approvals/ID/approve``) instead.
"""

from __future__ import annotations

import json
import time
from typing import Annotated

import typer

from toolbus.application.doors.approvals import ApprovalBook
from toolbus.cli._app import app
from toolbus.cli._door_state import (
    StateOption,
    authenticated_user,
    door_state,
    with_store,
)
from toolbus.cli._help import CommandApp
from toolbus.cli.plugin_api import VerboseOption, fail, setup_logging
from toolbus.domain.access.approvals import Approval
from toolbus.domain.errors import (
    AmbiguousApproval,
    ApprovalClosed,
    ApprovalNotFound,
    NotAnApprover,
)
from toolbus.ports import StateStore

#: How a decision taken here says its approver was authenticated.
VIA = "cli (api-key)"
_DOOR = "toolbus approvals"
_NO_STORE = (
    "no state store is configured: approvals wait in the store the doors share; name "
    'it with state = "nats://..." (or redis://...) in toolbus.toml, TOOLBUS_STATE or '
    "--state. A door without one keeps approvals in its own memory: decide them with "
    "its API (the gateway's /v1/approvals) or its console"
)

approvals_app = CommandApp(
    name="approvals",
    no_args_is_help=True,
    help="Calls waiting for a person's approval: list them, approve or deny one.",
)
app.add_typer(approvals_app)

NoteOption = Annotated[
    str | None, typer.Option("--note", help="Why; a denied call's model reads it.")
]
IdArgument = Annotated[
    str,
    typer.Argument(
        help="The approval's id, or its first characters (at least 4) when no other pending "
        "approval's id begins with them.",
        show_default=False,
    ),
]


def _line(approval: Approval, now: float) -> str:
    arguments = json.dumps(approval.arguments, ensure_ascii=False)
    left = max(0, int(approval.expires_at - now))
    return (
        f"{approval.id}  {approval.user} → {approval.tool}({arguments})  "
        f"approvers: {', '.join(approval.approvers)}  expires in {left} s\n    {approval.reason}"
    )


@approvals_app.command("list")
def list_approvals(
    state: StateOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each as a JSON line.")] = False,
    verbose: VerboseOption = False,
) -> None:
    """List the calls waiting for approval that you may decide or asked for, oldest first
    (secrets in arguments redacted). You are whoever TOOLBUS_API_KEY is the key of."""
    setup_logging(verbose)
    where = door_state(state, door=_DOOR, missing=_NO_STORE)
    user = authenticated_user(where.settings, who="approvers")
    pending = with_store(where, "approvals", lambda store: ApprovalBook(store).pending(user))
    if as_json:
        for approval in pending:
            typer.echo(approval.model_dump_json(exclude={"used"}))
        return
    if not pending:
        typer.echo("No call is waiting for approval.")
        return
    now = time.time()
    for approval in pending:
        typer.echo(_line(approval, now))


def _decide(approval_id: str, approve: bool, note: str | None, state: str | None) -> None:
    where = door_state(state, door=_DOOR, missing=_NO_STORE)
    user = authenticated_user(where.settings, who="approvers")

    async def decide(store: StateStore) -> Approval:
        try:
            book = ApprovalBook(store)
            return await book.decide(await book.resolve(approval_id), user, approve, note, via=VIA)
        except (ApprovalNotFound, AmbiguousApproval, NotAnApprover, ApprovalClosed) as exc:
            fail(str(exc))

    decided = with_store(where, "approvals", decide)
    typer.echo(f"{decided.status} by {user}: {decided.tool} for {decided.user} ({decided.id})")


@approvals_app.command("approve")
def approve(
    approval_id: IdArgument,
    note: NoteOption = None,
    state: StateOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Approve a waiting call as whoever TOOLBUS_API_KEY is the key of: the call is made,
    and audited with you as its approver."""
    setup_logging(verbose)
    _decide(approval_id, True, note, state)


@approvals_app.command("deny")
def deny(
    approval_id: IdArgument,
    note: NoteOption = None,
    state: StateOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Deny a waiting call as whoever TOOLBUS_API_KEY is the key of: it is not made, and its
    model reads the denial and the note."""
    setup_logging(verbose)
    _decide(approval_id, False, note, state)
