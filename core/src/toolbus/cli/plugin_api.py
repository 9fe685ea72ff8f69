"""The command-line API for distributions that add commands to ``toolbus``.

A distribution names a module in the ``toolbus.commands`` entry-point group; the
module implements ``toolbus_register_commands(cli)`` and adds its commands to
the :class:`CommandLine` it is handed. A command is a function whose parameters
are its arguments and options, declared the typer way
(``Annotated[str, typer.Option(help=...)]``), and whose docstring is its help.
Everything else a command needs comes from here, the same helpers ``toolbus``'s
own commands use::

    from toolbus.cli.plugin_api import CommandLine, VerboseOption, fail, run, setup_logging

A command that serves tool services ends in :func:`serve_until_signalled`; any
other that runs until stopped catches SIGTERM and SIGINT with
:func:`stop_signals` and waits for them with :meth:`StopSignals.wait`, so that
every long-running command stops, says so and exits the same way.

See docs/plugins.md ("Adding commands") for a complete example.
"""

from __future__ import annotations

from toolbus._internal.event_loops import EventLoop
from toolbus._internal.urls import redact_url
from toolbus.cli._common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    BrokerOption,
    LoopOption,
    VerboseOption,
    fail,
    run,
    setup_logging,
)
from toolbus.cli._serving import ServeOptions, serve_until_signalled
from toolbus.cli._signals import StopSignals, stop_signals
from toolbus.plugins import CommandGroup, CommandLine

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_FAILED",
    "BrokerOption",
    "CommandGroup",
    "CommandLine",
    "EventLoop",
    "LoopOption",
    "ServeOptions",
    "StopSignals",
    "VerboseOption",
    "fail",
    "redact_url",
    "run",
    "serve_until_signalled",
    "setup_logging",
    "stop_signals",
]
