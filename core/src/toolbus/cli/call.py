"""``toolbus call``: call one tool by name and print its observation."""

from __future__ import annotations

import json
import sys
import uuid
from collections.abc import Collection
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Annotated, Any

import typer

from toolbus.application.agent.steps import CallStopped
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.relaying import relaying
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.tasks import CLI_DOOR, call_task
from toolbus.application.identity import CallSigner, SigningKeyError
from toolbus.application.sealing.doors import shared_url
from toolbus.application.tasks import TaskBook
from toolbus.cli._app import app
from toolbus.cli._door_state import authenticated_user, door_state, with_store
from toolbus.cli._limits import EXIT_LIMITED, limited_calls
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
from toolbus.domain.config.descriptors import DEFAULT_GROUP
from toolbus.domain.config.registry import UNDEFINED_STATE, Registry
from toolbus.domain.errors import ConfigError, PluginError, ToolCallError, UnknownTool
from toolbus.domain.tasks import Task, parse_task_settings
from toolbus.domain.tasks.settings import SECTION as TASKS_SECTION
from toolbus.plugins import connect, load_tool_plugins
from toolbus.ports import Bus, ConsumerAwareBus, StateStore
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
    run_async: Annotated[
        bool,
        typer.Option(
            "--async",
            help="Start the call as a task and print its id: a door sharing the state store "
            "(a gateway) makes it, for whoever TOOLBUS_API_KEY is the key of, with their "
            "permissions; read it later with 'toolbus tasks show ID'. Needs a shared state "
            "store (state in toolbus.toml).",
        ),
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """Call a tool and print its observation.

    With the default memory:// broker the installed tool plugins are served in
    this process, so any installed tool can be tried without a broker. On a
    broker, the tool may also come from the config service or a service's
    announcement (live mode). A tool that asks its caller (a confirmation, a
    completion, the workspace roots) is answered at the terminal. With --async the
    call is a task that a door makes.
    """
    setup_logging(verbose)
    parse_arguments(arg or [], json_arguments)  # bad syntax fails before anything loads
    if run_async:
        if stream or sign_key is not None or user != "cli":
            fail(
                "--async hands the call to a door, which makes it for the user your API key "
                "(TOOLBUS_API_KEY) proves, with their permissions, and signs it as the door "
                "signs calls: --user, --sign-key and --stream do not apply"
            )
        call_async(tool, arg or [], json_arguments, group)
        return
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
            limits = await stack.enter_async_context(
                limited_calls(settings, user, tuple(group or ()))
            )
            permitted = None
            if limits is not None:
                verdict = await limits.check(registry, tool, arguments)
                if isinstance(verdict, CallStopped):
                    fail(verdict.observation, EXIT_LIMITED)
                permitted = verdict
            asking = sys.stdin.isatty() if ask is None else ask
            reported = None
            try:
                with relaying(TerminalRelay(root or ()) if asking else None):
                    if stream:
                        async for chunk in tools.stream(
                            tool, arguments, user=user, timeout=timeout
                        ):
                            typer.echo(chunk, nl=False)
                        typer.echo()
                    else:
                        result = await tools.invoke(tool, arguments, user=user, timeout=timeout)
                        reported = result.cost
                        typer.echo(result.observation)
            except ToolCallError as exc:
                if limits is not None and permitted is not None:
                    await limits.ended(permitted, registry.tool(tool).name, False, None)
                hint = "" if asking or exc.error_type != "input-unavailable" else NOT_ASKED
                fail(f"{exc.error_type}: {exc.message}{hint}", EXIT_FAILED)
            if limits is not None and permitted is not None:
                await limits.ended(permitted, registry.tool(tool).name, True, reported)

    run(main)


def call_async(
    tool: str, pairs: list[str], json_arguments: str | None, groups: list[str] | None
) -> None:
    """Write the call as a task to the doors' shared store, for a door to make; print its id.

    Nothing is sent on the bus from here: a replica of a door that shares the store
    (every door goes on with such tasks) takes the task within seconds and makes the
    call, so that it gets done after this command has exited.
    """
    where = door_state(
        None,
        door="toolbus call --async",
        missing='--async needs the state store the doors share (state = "nats://..." or '
        '"redis://..." in toolbus.toml, or TOOLBUS_STATE): the call is made by a door that '
        "shares it, after this command has exited; without one, call without --async",
    )
    url = where.settings.state
    assert url is not None
    if not shared_url(url):
        fail(
            f"--async: state {redact_url(url)} lives in this command's own memory, where no "
            "door would ever find the task; name the store the doors share (nats://... or "
            "redis://...), or call without --async"
        )
    user = authenticated_user(where.settings, who="callers")
    text: set[str] = set()
    descriptor = None
    if where.settings.config is not None:  # a mistyped name fails here, not in the task
        try:
            descriptor = build_registry(where.settings, load_tool_plugins()).tool(tool)
        except UnknownTool as exc:
            fail(str(exc))
        except (ConfigError, PluginError):
            pass  # the door making the call knows the tool, or its task says it does not
    if descriptor is not None:
        if descriptor.task_support == "forbidden":
            fail(
                f'tool {tool!r} forbids tasks (task-support = "forbidden"): call it without --async'
            )
        text = {a.name for a in descriptor.arguments if a.type == "string"}
    arguments = parse_arguments(pairs, json_arguments, text)
    ttl = parse_task_settings(where.settings.file.get(TASKS_SECTION)).ttl

    async def create(store: StateStore) -> Task:
        task = call_task(
            door=CLI_DOOR,
            owner=user,
            tool=tool,
            groups=groups or [DEFAULT_GROUP],
            state=UNDEFINED_STATE,
            request_id=str(uuid.uuid4()),
            arguments=arguments,
            ttl=ttl,
        )
        # No runner answers for it: the first door replica to look takes it.
        return await TaskBook(store).create(task)

    try:
        task = with_store(where, "tasks", create)
    except ConfigError as exc:
        fail(str(exc))
    typer.echo(task.id)
    typer.echo(
        f"task {task.id}: a door sharing the store makes the call within seconds; "
        f"'toolbus tasks show {task.id}' tells how it went",
        err=True,
    )
