"""``toolbus approvals list|approve|deny``: calls waiting for a person, from the command line.

Approvals wait in the state store the doors share (``state`` in
``toolbus.toml``, or ``TOOLBUS_STATE``); these commands read and write it
directly, so a decision reaches the waiting call on whichever replica of
whichever door holds it. ``--user`` says who decides: one of the approval's
approvers, as ``[approvals]`` names them. Whoever may reach the store may say
so; keep the store's credentials for operators.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer

from toolbus.application.doors.approvals import ApprovalBook
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli.plugin_api import VerboseOption, fail, redact_url, run, setup_logging
from toolbus.domain.access.approvals import Approval
from toolbus.domain.errors import (
    AmbiguousApproval,
    ApprovalClosed,
    ApprovalNotFound,
    ConfigError,
    NotAnApprover,
)
from toolbus.plugins import connect_state
from toolbus.settings import load_settings

T = TypeVar("T")

approvals_app = CommandApp(
    name="approvals",
    no_args_is_help=True,
    help="Calls waiting for a person's approval: list them, approve or deny one.",
)
app.add_typer(approvals_app)

StateOption = Annotated[
    str | None,
    typer.Option(
        "--state",
        metavar="URL",
        help="State store URL; default TOOLBUS_STATE, then state in toolbus.toml.",
    ),
]
UserOption = Annotated[
    str,
    typer.Option(
        "--user", help="Who decides: one of the approval's approvers.", show_default=False
    ),
]
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


def _with_book(state: str | None, work: Callable[[ApprovalBook], Awaitable[T]]) -> T:
    try:
        settings = load_settings(state=state)
    except ConfigError as exc:
        fail(str(exc))
    if settings.state is None:
        fail(
            "no state store is configured: approvals wait in the store the doors share; name "
            'it with state = "nats://..." (or redis://...) in toolbus.toml, TOOLBUS_STATE or '
            "--state. A door without one keeps approvals in its own memory: decide them with "
            "its API (the gateway's /v1/approvals) or its console"
        )
    url, options = settings.state, settings.state_options

    async def main() -> T:
        store = await connect_state(url, options)
        try:
            return await work(ApprovalBook(store))
        finally:
            await store.close()

    typer.echo(f"approvals in {redact_url(url)}", err=True)
    return run(main)


def _line(approval: Approval, now: float) -> str:
    arguments = json.dumps(approval.arguments, ensure_ascii=False)
    left = max(0, int(approval.expires_at - now))
    return (
        f"{approval.id}  {approval.user} → {approval.tool}({arguments})  "
        f"approvers: {', '.join(approval.approvers)}  expires in {left} s\n    {approval.reason}"
    )


@approvals_app.command("list")
def list_approvals(
    user: Annotated[
        str | None,
        typer.Option("--user", help="Only those this user may decide, or asked for."),
    ] = None,
    state: StateOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each as a JSON line.")] = False,
    verbose: VerboseOption = False,
) -> None:
    """List the calls waiting for approval, oldest first (secrets in arguments redacted)."""
    setup_logging(verbose)
    pending = _with_book(state, lambda book: book.pending(user))
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


def _decide(
    approval_id: str, user: str, approve: bool, note: str | None, state: str | None
) -> None:
    async def decide(book: ApprovalBook) -> Approval:
        try:
            return await book.decide(await book.resolve(approval_id), user, approve, note)
        except (ApprovalNotFound, AmbiguousApproval, NotAnApprover, ApprovalClosed) as exc:
            fail(str(exc))

    decided = _with_book(state, decide)
    typer.echo(f"{decided.status}: {decided.tool} for {decided.user} ({decided.id})")


@approvals_app.command("approve")
def approve(
    approval_id: IdArgument,
    user: UserOption,
    note: NoteOption = None,
    state: StateOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Approve a waiting call: it is made, and audited with USER as its approver."""
    setup_logging(verbose)
    _decide(approval_id, user, True, note, state)


@approvals_app.command("deny")
def deny(
    approval_id: IdArgument,
    user: UserOption,
    note: NoteOption = None,
    state: StateOption = None,
    verbose: VerboseOption = False,
) -> None:
    """Deny a waiting call: it is not made, and its model reads the denial and the note."""
    setup_logging(verbose)
    _decide(approval_id, user, False, note, state)
