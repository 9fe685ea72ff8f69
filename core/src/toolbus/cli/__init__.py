"""The ``toolbus`` command line. Each command lives in its own module.

Distributions add commands through :mod:`toolbus.cli.plugin_api`, the one public
module here besides this package.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

from toolbus._internal.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from toolbus.cli._app import app

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
    "dead_letters",
    "approvals",
    "tasks",
    "policy",
)


_assembled = False


def assemble() -> None:
    """Register the core's commands, then those installed distributions add (once)."""
    global _assembled
    if _assembled:
        return
    from toolbus.cli._app import app, serve_app
    from toolbus.cli._first_party import add_missing_first_party
    from toolbus.plugins import CommandLine, load_command_plugins

    for name in _COMMAND_MODULES:
        importlib.import_module(f"toolbus.cli.{name}")
    load_command_plugins(CommandLine(app, serve_app))
    add_missing_first_party(app, serve_app)
    _assembled = True


def main() -> None:
    if sys.argv[1:] == ["--version"]:
        # The answer is package metadata: no command (nor typer) needs loading for it.
        from toolbus.cli._versions import version_lines

        print("\n".join(version_lines()))
        return
    assemble()
    from toolbus.cli._app import app

    app()


# The typer application loads on first use (``toolbus.cli.app``), not with the package.
__getattr__ = lazy_exports(__name__, {"app": "_app"})


__all__ = ["app", "assemble", "main"]
