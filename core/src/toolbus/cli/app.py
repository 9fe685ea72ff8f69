"""The typer application every ``toolbus`` command module registers on."""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

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


#: The name of ``toolbus serve``'s default command.
SERVE_SERVICES = "services"


class DefaultCommandGroup(TyperGroup):
    """A group that runs its default command when the first word names no other.

    ``toolbus serve joke-service`` means ``toolbus serve services joke-service``,
    while ``toolbus serve mcp ...`` runs the ``mcp`` kind a distribution added.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        help_only = args and args[0] in ctx.help_option_names
        if args and not help_only and args[0] not in self.commands:
            args = [SERVE_SERVICES, *args]
        return super().parse_args(ctx, args)


serve_app = typer.Typer(
    name="serve",
    cls=DefaultCommandGroup,
    no_args_is_help=True,
    help="Serve tool services from their request queues, until SIGTERM or Ctrl-C.\n\n"
    "toolbus serve SERVICE... is short for toolbus serve services SERVICE...; "
    "the other commands below serve other kinds of tools.",
)
app.add_typer(serve_app)
