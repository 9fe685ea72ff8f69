"""The ``toolbus`` command line. Each command lives in its own module."""

from __future__ import annotations

import importlib

from toolbus.cli.app import app

# Importing a command module registers its commands on ``app``.
_COMMAND_MODULES = ("tools", "groups", "serve", "call", "config", "plugins", "demo", "bench")


def main() -> None:
    for name in _COMMAND_MODULES:
        importlib.import_module(f"toolbus.cli.{name}")
    app()


__all__ = ["app", "main"]
