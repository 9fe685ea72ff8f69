"""``toolbus call``: call one tool by name and print its observation."""

from __future__ import annotations

import json
import sys
from collections.abc import Collection
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.relaying import relaying
from toolbus.application.calls.tools import Tools
from toolbus.application.identity import CallSigner, SigningKeyError
from toolbus.cli._app import app
from toolbus.cli._live import DEFAULT_WAIT, LiveOption, WaitOption, follow, is_live, registry_with
from toolbus.cli._prompting import TerminalRelay
from toolbus.cli.plugin_api import (
    EXIT_FAILED,
    BrokerOption,
    VerboseOption,
    fail,
    redact_url,
    run,
    setup_logging,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError, ToolCallError, UnknownTool
from toolbus.plugins import connect, load_tool_plugins
from toolbus.ports import Bus, ConsumerAwareBus
from toolbus.runtime import build_registry, plugins_in_process
from toolbus.settings import load_settings


def parse_arguments(
    pairs: list[str], json_arguments: str | None, text_arguments: Collection[str] = ()
) -> dict[str, Any]:
    """``k=v`` pairs over ``--json``. A value is read as JSON when it parses, else as
    text; arguments the tool declares as strings (``text_arguments``) are always text."""
    arguments: dict[str, Any] = {}
    if json_arguments:
        try:
            loaded = json.loads(json_arguments)
        except ValueError as exc:
            fail(f"--json is not valid JSON: {exc}")
        if not isinstance(loaded, dict):
            fail('--json must be a JSON object, e.g. \'{"topic": "cats"}\'')
        arguments.update(loaded)
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--arg {pair!r} must look like name=value")
        if key in text_arguments:
            arguments[key] = value
            continue
        try:
            arguments[key] = json.loads(value)
        except ValueError:
            arguments[key] = value
    return arguments


def check_someone_serves(bus: Bus, registry: Registry, tool: str, broker: str) -> None:
    """Exit 2 at once when the bus knows that nothing serves ``tool``'s request queue.

    Only a bus living in this process can know that (memory://); on a broker the
    call waits for an answer, up to ``--timeout``.
    """
    if not isinstance(bus, ConsumerAwareBus):
        return
    service = registry.service_for(registry.tool(tool))
    if bus.has_consumers(service.request_queue):
        return
    fail(
        f"no service serves {tool!r}: nothing in this process takes requests for "
        f"{service.id!r} on {service.request_queue}, and {redact_url(broker)} reaches "
        "no other process. Install the tool plugin that provides the service, or run "
        "'toolbus serve' on a broker and give that broker with --broker"
    )


NOT_ASKED = " (toolbus call answers at a terminal, or with --ask)"


@app.command("call")
def call(
    tool: Annotated[str, typer.Argument(help="The tool's name.", show_default=False)],
    arg: Annotated[
        list[str] | None,
        typer.Option("--arg", "-a", metavar="NAME=VALUE", help="An argument as name=value."),
    ] = None,
    json_arguments: Annotated[
        str | None,
        typer.Option("--json", metavar="OBJECT", help="All arguments as one JSON object."),
    ] = None,
    user: Annotated[
        str,
        typer.Option(
            help="The user the call is made for, as the service sees it. The "
            "configuration's permissions are not applied: the command holds the broker's "
            "credentials (see docs/cli.md)."
        ),
    ] = "cli",
    stream: Annotated[bool, typer.Option(help="Print chunks as they arrive.")] = False,
    timeout: Annotated[float, typer.Option(help="Seconds to wait for the answer.")] = 30.0,
    broker: BrokerOption = None,
    config: Annotated[
        str | None,
        typer.Option(
            metavar="PATH",
            help="Configuration file or directory; default: installed plugins' tools.",
        ),
    ] = None,
    sign_key: Annotated[
        str | None,
        typer.Option(
            metavar="SOURCE",
            help="Sign the call with this private key: a JWK or PEM file, or env:VARIABLE "
            "(needs toolbus\\[signing]). Services that verify callers require it.",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option("--group", "-g", help="A group the signed call vouches for (repeatable)."),
    ] = None,
    ask: Annotated[
        bool | None,
        typer.Option(
            "--ask/--no-ask",
            help="Answer what the tool asks (a form, a completion) at this terminal. "
            "Default: when standard input is a terminal.",
            show_default=False,
        ),
    ] = None,
    root: Annotated[
        list[Path] | None,
        typer.Option(
            metavar="DIR",
            help="A workspace root a tool may ask for (repeatable); default: the working "
            "directory.",
            show_default=False,
        ),
    ] = None,
    live: LiveOption = None,
    wait: WaitOption = DEFAULT_WAIT,
    verbose: VerboseOption = False,
) -> None:
    """Call a tool and print its observation.

    With the default memory:// broker the installed tool plugins are served in
    this process, so any installed tool can be tried without a broker. On a
    broker, the tool may also come from the config service or a service's
    announcement (live mode). A tool that asks its caller (a confirmation, a
    completion, the workspace roots) is answered at the terminal.
    """
    setup_logging(verbose)
    parse_arguments(arg or [], json_arguments)  # bad syntax fails before anything loads
    try:
        settings = load_settings(broker, config)
        plugins = load_tool_plugins()
        local = build_registry(settings, plugins)
        following = is_live(live, settings.broker)
        if not following:
            local.tool(tool)
        signer = None if sign_key is None else CallSigner.load(sign_key, groups=group or ())
    except (ConfigError, PluginError, UnknownTool, SigningKeyError) as exc:
        fail(str(exc))
    if group and signer is None:
        fail("--group is what a signed call vouches for: give --sign-key too")

    async def main() -> None:
        async with AsyncExitStack() as stack:
            bus = await connect(settings.broker, settings.broker_options)
            stack.push_async_callback(bus.close)
            await stack.enter_async_context(
                plugins_in_process(bus, settings.broker, plugins, signer=signer)
            )
            client = await stack.enter_async_context(ToolServiceClient(bus, signer=signer))
            registry = local
            tools = Tools(client, registry)
            if following:
                follower = await follow(stack, bus, local.snapshot, plugins)
                registry = await registry_with(follower, tool, wait, redact_url(settings.broker))
                tools = follower.tools(client)
            check_someone_serves(bus, registry, tool, settings.broker)
            text = {a.name for a in registry.tool(tool).arguments if a.type == "string"}
            arguments = parse_arguments(arg or [], json_arguments, text)
            asking = sys.stdin.isatty() if ask is None else ask
            try:
                with relaying(TerminalRelay(root or ()) if asking else None):
                    if stream:
                        async for chunk in tools.stream(
                            tool, arguments, user=user, timeout=timeout
                        ):
                            typer.echo(chunk, nl=False)
                        typer.echo()
                    else:
                        typer.echo(await tools.call(tool, arguments, user=user, timeout=timeout))
            except ToolCallError as exc:
                hint = "" if asking or exc.error_type != "input-unavailable" else NOT_ASKED
                fail(f"{exc.error_type}: {exc.message}{hint}", EXIT_FAILED)

    run(main)
