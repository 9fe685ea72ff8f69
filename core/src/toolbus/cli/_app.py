"""The typer application every ``toolbus`` command module registers on."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from toolbus.cli._help import CommandApp, ReadableGroup
from toolbus.cli._versions import version_lines

app = CommandApp(
    name="toolbus",
    help="Agent tools behind message brokers.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def print_version(requested: bool) -> None:
    """``toolbus --version``: the core's version, then each installed distribution's."""
    if not requested:
        return
    for line in version_lines():
        typer.echo(line)
    raise typer.Exit()


@app.callback()
def toolbus(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=print_version,
            is_eager=True,
            help="Print the versions of toolbus and its installed plugins, and exit.",
        ),
    ] = False,
) -> None:
    """Agent tools behind message brokers."""
    # A callback keeps typer in multi-command mode even when a single command is
    # registered, so that ``toolbus tools`` never turns into plain ``toolbus``.


#: The name of ``toolbus serve``'s default command.
SERVE_SERVICES = "services"


class DefaultCommandGroup(ReadableGroup):
    """A group that runs its default command when the first word names no other.

    ``toolbus serve joke-service`` means ``toolbus serve services joke-service``,
    while ``toolbus serve mcp ...`` runs the ``mcp`` kind a distribution added.
    """

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        help_only = args and args[0] in ctx.help_option_names
        if args and not help_only and args[0] not in self.commands:
            args = [SERVE_SERVICES, *args]
        return super().parse_args(ctx, args)


serve_app = CommandApp(
    name="serve",
    cls=DefaultCommandGroup,
    no_args_is_help=True,
    help="Serve tool services from their request queues, until SIGTERM or Ctrl-C.\n\n"
    "toolbus serve SERVICE... is short for toolbus serve services SERVICE...; "
    "the other commands below serve other kinds of tools.",
)
app.add_typer(serve_app)
