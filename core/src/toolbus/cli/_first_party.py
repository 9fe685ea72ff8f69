"""Stand-ins for the commands of toolbus's own optional distributions, when not installed.

Distributions add commands through :mod:`toolbus.cli.plugin_api`. The
first-party ones are known by name here, so that a command whose distribution
is missing still answers, with the ``pip install`` line that brings it,
instead of "no such command".
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import typer

from toolbus.cli._common import EXIT_BAD_INPUT


@dataclass(frozen=True, slots=True)
class FirstPartyCommand:
    """A command a first-party distribution adds, and the extra that installs it."""

    name: str
    extra: str
    help: str
    under_serve: bool = False


#: Shown, with how to install them, when their distribution is missing.
FIRST_PARTY_COMMANDS = (
    FirstPartyCommand("mcp", "mcp", "Serve bus tools to MCP clients."),
    FirstPartyCommand("gateway", "gateway", "Serve tools and agent sessions over HTTP."),
    FirstPartyCommand("mcp", "mcp", "Serve an MCP server's tools on the bus.", under_serve=True),
    FirstPartyCommand(
        "openapi", "openapi", "Serve an HTTP API's operations on the bus.", under_serve=True
    ),
)


def add_missing_first_party(app: typer.Typer, serve: typer.Typer) -> None:
    """Register a stand-in for each first-party command no installed distribution added.

    ``app`` is ``toolbus``'s command line, ``serve`` its ``toolbus serve``.
    """
    for command in FIRST_PARTY_COMMANDS:
        target = serve if command.under_serve else app
        if any(_name(info) == command.name for info in target.registered_commands):
            continue
        if any(group.name == command.name for group in target.registered_groups):
            continue
        target.command(
            command.name,
            help=f"{command.help} (needs toolbus\\[{command.extra}])",
            context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
            add_help_option=False,
        )(_missing(command))


def _name(info: typer.models.CommandInfo) -> str | None:
    if info.name is not None:
        return info.name
    callback = info.callback
    return None if callback is None else callback.__name__.replace("_", "-")


def _missing(command: FirstPartyCommand) -> Callable[[], None]:
    where = f"toolbus serve {command.name}" if command.under_serve else f"toolbus {command.name}"

    def missing() -> None:
        typer.echo(
            f"error: {where} needs the toolbus-{command.extra} distribution; "
            f"install it with: pip install 'toolbus[{command.extra}]'",
            err=True,
        )
        raise typer.Exit(EXIT_BAD_INPUT)

    return missing
