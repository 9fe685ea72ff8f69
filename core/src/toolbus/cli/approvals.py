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
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, TypeVar

import typer

from toolbus.application.doors.approvals import ApprovalBook
from toolbus.application.identity.credentials import Secret, load_credentials
from toolbus.application.sealing import SealKeys
from toolbus.application.sealing.doors import door_store, shared_url
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
from toolbus.runtime import seal_keys_of
from toolbus.settings import Settings, load_settings

T = TypeVar("T")

#: The environment variable holding the approver's API key (never a flag: it would be
#: in the shell's history and the process list).
API_KEY_ENV = "TOOLBUS_API_KEY"
#: How a decision taken here says its approver was authenticated.
VIA = "cli (api-key)"
_DOOR = "toolbus approvals"

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


@dataclass(frozen=True, slots=True)
class _Store:
    """Where approvals wait, and the keys that seal them."""

    settings: Settings
    keys: SealKeys | None


def _store(state: str | None) -> _Store:
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
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    try:
        keys = seal_keys_of(settings, base, door=_DOOR, url=settings.state)
    except ConfigError as exc:
        fail(str(exc))
    return _Store(settings, keys)


def _approver(settings: Settings) -> str:
    """Who runs the command, proven by their API key; exits 2 naming the fix otherwise."""
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    try:
        table = load_credentials(settings=settings.file, base_dir=base)
    except ConfigError as exc:
        fail(str(exc))
    if table is None or len(table) == 0:
        fail(
            "approvers prove who they are with an API key, and toolbus.toml has no "
            "[credentials] table to check one against; add the approvers' keys there "
            '([[credentials.api-keys]] user = "ops", env = "..."), as the gateway has them'
        )
    presented = os.environ.get(API_KEY_ENV)
    if not presented:
        fail(
            f"set {API_KEY_ENV} to your API key: approvers prove who they are, the command "
            "line cannot name them"
        )
    identity = table.authenticate(Secret(presented))
    if identity is None:
        fail(f"{API_KEY_ENV} is not an API key of [credentials] in toolbus.toml")
    return identity.user


def _with_book(where: _Store, work: Callable[[ApprovalBook], Awaitable[T]]) -> T:
    url, options = where.settings.state, where.settings.state_options
    assert url is not None

    async def main() -> T:
        store = await connect_state(url, options)
        try:
            sealed = door_store(_DOOR, store, where.keys, private=not shared_url(url))
            return await work(ApprovalBook(sealed))
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
    state: StateOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print each as a JSON line.")] = False,
    verbose: VerboseOption = False,
) -> None:
    """List the calls waiting for approval that you may decide or asked for, oldest first
    (secrets in arguments redacted). You are whoever TOOLBUS_API_KEY is the key of."""
    setup_logging(verbose)
    where = _store(state)
    user = _approver(where.settings)
    pending = _with_book(where, lambda book: book.pending(user))
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
    where = _store(state)
    user = _approver(where.settings)

    async def decide(book: ApprovalBook) -> Approval:
        try:
            return await book.decide(await book.resolve(approval_id), user, approve, note, via=VIA)
        except (ApprovalNotFound, AmbiguousApproval, NotAnApprover, ApprovalClosed) as exc:
            fail(str(exc))

    decided = _with_book(where, decide)
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
