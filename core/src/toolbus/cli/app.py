"""The typer application every ``toolbus`` command module registers on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="toolbus",
    help="Agent tools behind message brokers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def toolbus() -> None:
    """Agent tools behind message brokers."""
    # A callback keeps typer in multi-command mode even when a single command is
    # registered, so that ``toolbus tools`` never turns into plain ``toolbus``.
