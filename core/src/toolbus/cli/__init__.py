"""The ``toolbus`` command line. Each command lives in its own module."""

from __future__ import annotations

import importlib

from toolbus.cli.app import app, serve_app
from toolbus.cli.extensions import CommandLine, add_missing_first_party
from toolbus.plugins import load_command_plugins

# Importing a command module registers its commands on ``app``.
_COMMAND_MODULES = (
    "tools",
    "groups",
    "serve",
    "call",
    "agent",
    "config",
    "plugins",
    "demo",
    "bench",
    "keys",
    "asyncapi",
)


_assembled = False


def assemble() -> None:
    """Register the core's commands, then those installed distributions add (once)."""
    global _assembled
    if _assembled:
        return
    for name in _COMMAND_MODULES:
        importlib.import_module(f"toolbus.cli.{name}")
    cli = CommandLine(app=app, serve=serve_app)
    load_command_plugins(cli)
    add_missing_first_party(cli)
    _assembled = True


def main() -> None:
    assemble()
    app()


__all__ = ["app", "assemble", "main"]
