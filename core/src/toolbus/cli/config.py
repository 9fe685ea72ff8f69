"""``toolbus config put|get|list|delete|load``: the config service's items, over the bus.

Like TrustGraph's ``tg-put-config-item``: items are named ``TYPE/KEY``
(``tool/tell-joke``, ``tool-service/joke-service``) and values are JSON::

    toolbus config put tool/tell-joke < tell-joke.json
    toolbus config put tool/tell-joke --value '{"type": "tool-service", ...}'
    toolbus config get tool/tell-joke
    toolbus config list tool
    toolbus config delete tool/tell-joke
    toolbus config load ./config-dir        # every item of a file or directory, one change

A change the config service refuses (it would make the configuration
invalid) prints every problem and exits with status 2; nothing is stored.
"""

from __future__ import annotations

import getpass
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.live.config_client import DEFAULT_TIMEOUT, ChangeResult, ConfigClient
from toolbus.application.live.config_files import read_snapshot
from toolbus.application.live.config_service import CONFIG_REQUEST_QUEUE
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli.plugin_api import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    BrokerOption,
    VerboseOption,
    fail,
    redact_url,
    run,
    setup_logging,
)
from toolbus.domain.config.parsing import parse_json
from toolbus.domain.errors import ConfigError, NotFound, ToolTimeout
from toolbus.domain.live.items import ConfigRejected, ItemName, Put, parse_item, parse_type
from toolbus.plugins import connect
from toolbus.settings import load_settings

T = TypeVar("T")

config_app = CommandApp(
    name="config",
    help="Read and change the configuration kept by the config service (toolbus serve config).",
    no_args_is_help=True,
)
app.add_typer(config_app, name="config")

Timeout = Annotated[float, typer.Option(help="Seconds to wait for the config service's answer.")]
User = Annotated[
    str | None, typer.Option(help="Who makes the change (logged by the service); default: you.")
]
Item = Annotated[
    str,
    typer.Argument(help="TYPE/KEY, e.g. tool/tell-joke.", show_default=False, metavar="TYPE/KEY"),
]


def _item(text: str) -> ItemName:
    try:
        return parse_item(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'TYPE/KEY'") from None


def _user(user: str | None) -> str:
    if user is not None:
        return user
    try:
        return getpass.getuser()
    except Exception:  # no user name to be had (some containers): anonymous
        return ""


def _talk(
    broker: str | None,
    timeout: float,
    user: str | None,
    verbose: bool,
    action: Callable[[ConfigClient], Awaitable[T]],
) -> T:
    """Connect, run ``action`` with a :class:`ConfigClient`, and turn failures into exits."""
    setup_logging(verbose)
    settings = load_settings(broker)
    if settings.broker.startswith("memory:"):
        fail(
            f"the broker is {redact_url(settings.broker)}, which lives inside one process, so "
            "no config service can be reached through it; give --broker (or TOOLBUS_BROKER) "
            "the URL of the broker the config service uses, e.g. nats://127.0.0.1:4222"
        )

    async def main() -> T:
        bus = await connect(settings.broker, settings.broker_options)
        try:
            async with ToolServiceClient(bus) as client:
                config = ConfigClient(client, timeout=timeout, user=_user(user))
                try:
                    return await action(config)
                except (ConfigRejected, NotFound) as exc:
                    fail(exc.message, EXIT_BAD_INPUT)
                except ToolTimeout:
                    fail(
                        f"no config service answered on {CONFIG_REQUEST_QUEUE} via "
                        f"{redact_url(settings.broker)} within {timeout:g} s; start one with "
                        f"'toolbus serve config --store PATH --broker URL', or raise --timeout",
                        EXIT_FAILED,
                    )
        finally:
            await bus.close()

    return run(main)


def _report(name: str, result: ChangeResult, verb: str) -> None:
    if result.changed:
        typer.echo(f"{verb} {name}: version {result.version}")
    else:
        typer.echo(f"{name} unchanged: version {result.version}")


def _read_value(value: str | None, name: ItemName) -> Any:
    if value is None:
        if sys.stdin.isatty():
            fail(f"give the value of {name} as JSON with --value, or on standard input")
        value = sys.stdin.read()
    try:
        return parse_json(value)
    except ValueError as exc:
        fail(f"the value of {name} {exc}")


@config_app.command("put")
def put(
    item: Item,
    value: Annotated[
        str | None,
        typer.Option(
            metavar="JSON",
            help="The value as JSON; default: read from standard input.",
            show_default=False,
        ),
    ] = None,
    broker: BrokerOption = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    user: User = None,
    verbose: VerboseOption = False,
) -> None:
    """Set TYPE/KEY to a JSON value; refused (and nothing stored) if the result is invalid."""
    name = _item(item)
    parsed = _read_value(value, name)
    result = _talk(broker, timeout, user, verbose, lambda config: config.put(name, parsed))
    _report(str(name), result, "stored")


@config_app.command("get")
def get(
    item: Item,
    broker: BrokerOption = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    verbose: VerboseOption = False,
) -> None:
    """Print the JSON value of TYPE/KEY."""
    name = _item(item)
    value = _talk(broker, timeout, None, verbose, lambda config: config.get(name))
    typer.echo(json.dumps(value, indent=2, ensure_ascii=False))


@config_app.command("list")
def list_items(
    type_: Annotated[
        str | None,
        typer.Argument(
            metavar="TYPE", help="Only items of this type, e.g. tool.", show_default=False
        ),
    ] = None,
    broker: BrokerOption = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    verbose: VerboseOption = False,
) -> None:
    """Print every TYPE/KEY (or those of one TYPE), one per line, in configuration order."""
    if type_ is not None:
        try:
            parse_type(type_)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="'TYPE'") from None
    names = _talk(broker, timeout, None, verbose, lambda config: config.list(type_))
    for name in names:
        typer.echo(str(name))


@config_app.command("delete")
def delete(
    item: Item,
    broker: BrokerOption = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    user: User = None,
    verbose: VerboseOption = False,
) -> None:
    """Remove TYPE/KEY; refused if something still needs it (a tool's service, say)."""
    name = _item(item)
    result = _talk(broker, timeout, user, verbose, lambda config: config.delete(name))
    _report(str(name), result, "deleted")


@config_app.command("load")
def load(
    source: Annotated[
        Path,
        typer.Argument(
            help="A snapshot JSON file, or a directory holding tool-service/ and tool/.",
            show_default=False,
        ),
    ],
    replace: Annotated[
        bool,
        typer.Option(help="Make the configuration exactly SOURCE: remove every other item."),
    ] = False,
    broker: BrokerOption = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    user: User = None,
    verbose: VerboseOption = False,
) -> None:
    """Put every item of a file or directory, as one change (all or nothing)."""
    try:
        snapshot = read_snapshot(source)
    except ConfigError as exc:
        fail(f"{source}: {exc}")
    changes = []
    for type_, section in snapshot.items():
        if not isinstance(section, dict):
            fail(f"{source}: section {type_!r} is not an object of KEY: value items")
        changes += [Put(ItemName(type_, key), value) for key, value in section.items()]
    result = _talk(
        broker, timeout, user, verbose, lambda config: config.apply(changes, replace=replace)
    )
    _report(f"{len(changes)} items from {source}", result, "loaded")
