"""What every command shares: running async code, reporting errors, exit codes, options.

Command plugins reach these through :mod:`toolbus.cli.plugin_api`; this module is
the command line's own.

Exit codes: 0 success, 1 the tool or broker failed, 2 bad input or configuration.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import anyio
import typer

from toolbus._internal.event_loops import EventLoop, EventLoopUnavailable, backend_options
from toolbus._internal.urls import RedactingFormatter, redact_urls
from toolbus.domain.errors import (
    ConfigError,
    PluginError,
    ToolbusError,
    UnknownTool,
)
from toolbus.settings import load_settings

T = TypeVar("T")

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2

#: Errors that mean the command was given something wrong (exit 2), not that
#: the tool or the broker failed (exit 1).
BAD_INPUT = (ConfigError, PluginError, UnknownTool)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``error: message`` on stderr and exit with ``code`` (bad input by default).

    A URL in the message (a library's error may quote one) is shown redacted.
    """
    typer.echo(f"error: {redact_urls(message)}", err=True)
    raise typer.Exit(code)


#: ``--config PATH`` as the commands that read a configuration take it; resolve
#: the value with :func:`config_path`.
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-c",
        metavar="PATH",
        help="Snapshot JSON file, or directory holding tool-service/ and tool/; "
        "default: TOOLBUS_CONFIG, then config in toolbus.toml.",
    ),
]


def config_path(option: Path | None) -> Path:
    """The configuration to read: ``--config``, else TOOLBUS_CONFIG, else toolbus.toml."""
    try:
        found = load_settings(config=option).config
    except ConfigError as exc:
        fail(str(exc))
    if found is None:
        fail(
            "no configuration given: pass --config PATH, set TOOLBUS_CONFIG, or put "
            'config = "PATH" in toolbus.toml'
        )
    return found


#: ``--broker URL`` as every command that talks to a broker takes it.
BrokerOption = Annotated[
    str | None,
    typer.Option(metavar="URL", help="Broker URL; default from TOOLBUS_BROKER or toolbus.toml."),
]

#: ``--verbose``/``-v``: log at INFO (see :func:`setup_logging`).
VerboseOption = Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")]

#: ``--loop`` as the long-running commands take it (serve, agent serve, bench).
LoopOption = Annotated[
    EventLoop,
    typer.Option(
        "--loop",
        envvar="TOOLBUS_LOOP",
        case_sensitive=False,
        help="Event loop: uvloop (needs toolbus\\[uvloop]), asyncio, or auto (uvloop when "
        "installed, else asyncio). Also TOOLBUS_LOOP.",
    ),
]


def run(main: Callable[..., Awaitable[T]], *args: Any, loop: EventLoop = EventLoop.ASYNCIO) -> T:
    """Run ``main`` on asyncio (on uvloop if ``loop`` says so), with readable exits."""
    try:
        options = backend_options(loop)
    except EventLoopUnavailable as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    try:
        return anyio.run(main, *args, backend="asyncio", backend_options=options)
    except BAD_INPUT as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    except ToolbusError as exc:
        fail(str(exc), EXIT_FAILED)
    except BaseExceptionGroup as group:
        # A failure inside a task group (a host that cannot subscribe, say) arrives
        # wrapped; show the first toolbus error it holds, not the traceback.
        toolbus_errors = group.subgroup(ToolbusError)
        if toolbus_errors is None:
            raise
        first: BaseException = toolbus_errors
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        code = EXIT_BAD_INPUT if isinstance(first, BAD_INPUT) else EXIT_FAILED
        fail(str(first), code)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def setup_logging(verbose: bool) -> None:
    """Log to stderr: warnings and up, or from INFO with ``verbose`` (``--verbose``).

    Every line shows URLs as :func:`~toolbus._internal.urls.redact_url` does:
    a library's message or a traceback may quote a URL with its secrets.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
