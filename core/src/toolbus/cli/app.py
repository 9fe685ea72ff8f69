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
