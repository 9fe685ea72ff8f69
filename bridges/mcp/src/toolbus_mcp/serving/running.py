"""What ``toolbus mcp serve`` runs: the bus, the tools, and the MCP server on its transport."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio
from anyio.abc import TaskStatus

from toolbus._internal.web_server import parse_listen
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.door import FrontDoor
from toolbus.application.doors.tasks import CLI_DOOR, CallTasks
from toolbus.application.identity.bearer import Authenticator
from toolbus.application.identity.credentials import load_credentials
from toolbus.application.identity.signing import CallSigner
from toolbus.application.live.registry import LiveRegistry
from toolbus.application.sealing.doors import shared_url
from toolbus.application.tasks import TaskBook, TaskRunner
from toolbus.cli.plugin_api import redact_url
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, Problem
from toolbus.domain.tasks import TaskSettings, parse_task_settings
from toolbus.domain.tasks.settings import SECTION as TASKS_SECTION
from toolbus.hooks import CodeHooks
from toolbus.plugins import ToolPlugin, connect, load_tool_plugins
from toolbus.ports import StateStore
from toolbus.runtime import opened_door, plugins_in_process, registry_from, tool_types
from toolbus.settings import Settings, load_settings
from toolbus_mcp.serving.server import BusMcpServer, McpCaller
from toolbus_mcp.serving.settings import SECTION, parse_mcp_settings
from toolbus_mcp.serving.tasks import DEFAULT_TASK_AFTER, McpTasks
from toolbus_mcp.serving.transports import serve_http, serve_stdio


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """``toolbus mcp serve``'s options."""

    broker: str | None = None
    config: Path | None = None
    live: bool = True
    transport: Literal["stdio", "http"] = "stdio"
    listen: str = "127.0.0.1:8000"
    user: str = "mcp"
    groups: tuple[str, ...] | None = None
    state: str | None = None
    timeout: float = 60.0
    #: Signs every call with the caller's user and groups (services that verify need it).
    signer: CallSigner | None = None
    #: Serve HTTP callers even with no permissions configured (--no-access-control).
    no_access_control: bool = False
    #: Answer HTTP requests with one JSON body rather than an event stream (--json-response).
    json_response: bool = False
    #: Seconds an optional tool's call answers in place before it becomes a task (--task-after).
    task_after: float = DEFAULT_TASK_AFTER


def authenticator(snapshot: Mapping[str, Any], settings: Settings) -> Authenticator:
    """Who HTTP callers are: the API keys of the configuration (else of toolbus.toml), and
    the identity provider's tokens of ``[mcp.jwt]``."""
    base = settings.config.parent if settings.config is not None else Path.cwd()
    table = load_credentials(snapshot, settings.file, base_dir=base)
    tokens = parse_mcp_settings(settings.file.get(SECTION)).jwt
    if (table is None or not len(table)) and tokens is None:
        raise ConfigError(
            [
                Problem(
                    "--transport http",
                    "",
                    "needs a way to authenticate callers: add [[credentials.api-keys]] "
                    "entries to toolbus.toml (or a credentials object to the configuration), "
                    "or an identity provider's tokens under [mcp.jwt] (docs/mcp.md#logging-in)",
                )
            ]
        )
    return Authenticator.from_settings(
        table if table else None,
        tokens,
        where="toolbus.toml [mcp.jwt]",
        door="toolbus mcp serve",
        base_dir=settings.file_path.parent if settings.file_path is not None else Path.cwd(),
    )


@asynccontextmanager
async def bus_tools(
    options: ServeOptions, settings: Settings, local: Registry, plugins: Sequence[ToolPlugin]
) -> AsyncIterator[tuple[Tools, LiveRegistry | None]]:
    """Connect to the broker; the tools of ``--config`` and, when live, of the bus."""
    async with AsyncExitStack() as stack:
        bus = await connect(settings.broker, settings.broker_options)
        stack.push_async_callback(bus.close)
        # On memory:// no other process can serve the tools: this one does, as
        # toolbus call does.
        await stack.enter_async_context(
            plugins_in_process(bus, settings.broker, plugins, signer=options.signer)
        )
        client = await stack.enter_async_context(ToolServiceClient(bus, signer=options.signer))
        if not options.live:
            yield Tools(client, local), None
            return
        live = LiveRegistry(bus, local=local.snapshot, tool_types=tool_types(plugins))
        await stack.enter_async_context(live)
        yield live.tools(client), live


async def serve_bus(options: ServeOptions, until: Callable[[], Awaitable[object]]) -> None:
    """Serve until ``until()`` returns (the command's stop signal), or over stdio until
    the client disconnects."""
    settings = load_settings(options.broker, options.config)
    task_settings = parse_task_settings(settings.file.get(TASKS_SECTION))
    plugins = load_tool_plugins()
    in_memory = settings.broker.startswith("memory:")
    # On memory:// the installed plugins' services run here (bus_tools), so their
    # tools are the default, as for toolbus call; elsewhere the bus says what runs.
    local = registry_from(settings.config or (None if in_memory else {}), plugins)
    callers = None
    # Over stdio the one client is the command's; over HTTP each request's comes
    # from the gate.
    caller: McpCaller | None = McpCaller(options.user, options.groups, options.state)
    if options.transport == "http":
        try:
            host, port = parse_listen(options.listen)
        except ValueError as exc:
            raise ConfigError([Problem("--listen", "", str(exc))]) from None
        callers = authenticator(local.snapshot, settings)
        caller = None
    async with (
        bus_tools(options, settings, local, plugins) as (tools, live),
        opened_door(
            tools,
            local=local.snapshot,
            settings=settings,
            code_hooks=CodeHooks.installed(),
            timeout=options.timeout,
            door_name="toolbus mcp serve",
        ) as door,
    ):
        if callers is not None:
            warning = door.require_access_control(
                "toolbus mcp serve --transport http", allow_off=options.no_access_control
            )
            if warning is not None:
                print(f"warning: {warning}", file=sys.stderr, flush=True)
        server = BusMcpServer(door, live=live, caller=caller)
        assert door.store is not None  # opened_door opens every door's store
        if caller is not None:
            # The first tools/list checks the groups and state; refuse them before serving.
            server.admit(caller)
        try:
            async with (
                door_tasks(
                    door,
                    door.store,
                    shared=shared_url(settings.state),
                    settings=task_settings,
                ) as calls,
                anyio.create_task_group() as tasks,
            ):
                McpTasks(server, calls, task_after=options.task_after)
                await tasks.start(server.follow_changes)
                if callers is None:
                    # Over stdio the client may also end it, by closing stdin.
                    await tasks.start(_until_done, serve_stdio(server), tasks.cancel_scope)
                    where = f"stdio for user {options.user!r}"
                else:
                    port = await tasks.start(
                        lambda task_status: serve_http(
                            server,
                            callers,
                            host=host,
                            port=port,
                            json_response=options.json_response,
                            task_status=task_status,
                        )
                    )
                    where = f"http://{host}:{port}/mcp"
                print(
                    f"serving MCP on {where} via {redact_url(settings.broker)}",
                    file=sys.stderr,
                    flush=True,
                )
                await until()
                tasks.cancel_scope.cancel()
        finally:
            with anyio.CancelScope(shield=True):
                await server.close()


@asynccontextmanager
async def door_tasks(
    door: FrontDoor, store: StateStore, *, shared: bool, settings: TaskSettings | None = None
) -> AsyncIterator[CallTasks]:
    """The door's calls as tasks, kept in ``store`` (the door's state store; ``shared``:
    other replicas share it, and go on with the tasks this one leaves when it stops),
    run as ``settings`` (the ``[tasks]`` table) says. A task whose call will not be made
    withdraws the approval it waited for; tasks written for a caller that does not wait
    (``toolbus call --async``) are made here too, when this replica takes them first."""
    settings = settings or TaskSettings.model_validate({})
    runner = TaskRunner(TaskBook(store), shared=shared, lease=settings.lease)
    calls = CallTasks(door, runner, settings)
    runner.on_abandoned = calls.withdraw
    runner.resumes(CLI_DOOR, calls.resume)
    async with runner:
        yield calls


async def _until_done(
    serving: Awaitable[None],
    scope: anyio.CancelScope,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``serving``; when it ends by itself, end ``scope`` (and so the command) too."""
    task_status.started()
    await serving
    scope.cancel()
