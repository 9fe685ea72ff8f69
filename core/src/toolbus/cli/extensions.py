"""Commands that other distributions add to ``toolbus``, through entry points.

A distribution adds commands with an entry point in the ``toolbus.commands``
group naming a module that implements
:meth:`toolbus.plugins.Spec.toolbus_register_commands`. The hook receives a
:class:`CommandLine` and adds typer commands to ``cli.app`` (``toolbus NAME``)
or to ``cli.serve`` (``toolbus serve KIND``, a kind of service beside the
default ``toolbus serve SERVICE...``).

The first-party command distributions are known by name, so that a command
whose distribution is missing still answers, with the ``pip install`` line
that brings it, instead of "no such command".
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

import typer

from toolbus.cli.common import EXIT_BAD_INPUT

log = logging.getLogger("toolbus.cli")


@dataclass(frozen=True, slots=True)
class CommandLine:
    """Where a distribution's commands go."""

    #: ``toolbus NAME ...``
    app: typer.Typer
    #: ``toolbus serve KIND ...``
    serve: typer.Typer


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


def add_missing_first_party(cli: CommandLine) -> None:
    """Register a stand-in for each first-party command no installed distribution added."""
    for command in FIRST_PARTY_COMMANDS:
        target = cli.serve if command.under_serve else cli.app
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
