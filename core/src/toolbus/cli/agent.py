"""``toolbus agent serve`` and ``toolbus ask``: the agent loop on the bus, and asking it."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Annotated

import anyio
import typer

from toolbus._internal.event_loops import EventLoop, running_loop_name
from toolbus._internal.heap import settle_heap
from toolbus.application.agent.checkpoints import RunCheckpoints
from toolbus.application.agent.llm import LLM
from toolbus.application.agent.loop import (
    DEFAULT_MAX_ITERATIONS,
    DEFAULT_TIME_LIMIT,
    AgentLimits,
    AgentLoop,
)
from toolbus.application.agent.service import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DRAIN_TIMEOUT,
    AgentClient,
    AgentService,
    failure_event,
)
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.conversations import DoorConversations
from toolbus.application.doors.holding import SessionHolder
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.live.agent_presence import AgentPresence, agent_service_answers
from toolbus.application.sealing import SealKeys
from toolbus.application.tracing.export import export_from_environment
from toolbus.cli._agent_output import EventPrinter
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli._prompting import TerminalRelay
from toolbus.cli.plugin_api import (
    EXIT_FAILED,
    BrokerOption,
    LoopOption,
    fail,
    redact_url,
    run,
    setup_logging,
    stop_signals,
)
from toolbus.domain.agent.wire import (
    DEFAULT_REQUEST_QUEUE,
    DEFAULT_RESPONSE_QUEUE,
    AgentRequest,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.hooks import CodeHooks
from toolbus.plugins import ToolPlugin, connect, connect_llm, load_tool_plugins
from toolbus.ports import Bus, StateStore
from toolbus.runtime import (
    build_registry,
    door_state,
    opened_door,
    plugins_in_process,
    seal_keys_of,
)
from toolbus.settings import Settings, load_settings

#: How the agent service names itself in start-up errors.
AGENT_DOOR = "toolbus agent serve"

#: Where ``--llm`` comes from when it is not given.
LLM_VARIABLE = "TOOLBUS_LLM"
#: Seconds an agent run's checkpoint outlives its time limit, for a replica to go on with it.
CHECKPOINT_GRACE = 300.0
#: Seconds ``toolbus ask`` waits on a broker for an agent service to say it answers.
PRESENCE_WAIT = 5.0

agent_app = CommandApp(
    name="agent",
    no_args_is_help=True,
    help="Run the agent loop as a service on the bus (toolbus ask talks to it).",
)
app.add_typer(agent_app)

LLMOption = Annotated[
    str | None,
    typer.Option(
        "--llm",
        metavar="URL",
        help="The model: openai://MODEL, openai+http://HOST:PORT/v1/MODEL, anthropic://MODEL, "
        "scripted://demo...; default from TOOLBUS_LLM. API keys come from environment "
        "variables (OPENAI_API_KEY, ANTHROPIC_API_KEY).",
        show_default=False,
    ),
]
ConfigOpt = Annotated[
    str | None,
    typer.Option(
        "--config",
        "-c",
        metavar="PATH",
        help="Configuration file or directory; default TOOLBUS_CONFIG, toolbus.toml, "
        "else the installed plugins' tools.",
    ),
]
NoAccessControl = Annotated[
    bool,
    typer.Option(
        "--no-access-control",
        help="Serve even though no permissions are configured: every caller may then use "
        "every tool. Without it, a broker-facing agent without \\[permissions] refuses to start.",
    ),
]
RequestQueue = Annotated[str, typer.Option(metavar="QUEUE", help="The queue agent requests go to.")]
ResponseQueue = Annotated[
    str, typer.Option(metavar="QUEUE", help="The queue agent events come back on.")
]


def _llm_url(option: str | None) -> str | None:
    return option or os.environ.get(LLM_VARIABLE) or None


def agent_seal_keys(settings: Settings) -> SealKeys | None:
    """The keys that seal the agent service's shared store (``ConfigError`` naming the fix)."""
    base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
    return seal_keys_of(settings, base, door=AGENT_DOOR, url=settings.state)


def _plan(broker: str | None, config: str | None) -> tuple[Settings, list[ToolPlugin], Registry]:
    try:
        settings = load_settings(broker, config)
        plugins = load_tool_plugins()
        return settings, plugins, build_registry(settings, plugins)
    except (ConfigError, PluginError) as exc:
        fail(str(exc))


@asynccontextmanager
async def _agent(
    stack: AsyncExitStack,
    bus: Bus,
    settings: Settings,
    plugins: list[ToolPlugin],
    registry: Registry,
    llm_url: str,
    limits: AgentLimits,
    system_prompt: str | None,
    *,
    access_control: bool | None = None,
) -> AsyncIterator[AgentLoop]:
    """A loop over ``bus`` whose sessions the front door opens; on memory:// the
    installed plugins' services run in this process too.

    ``access_control``: for a door on a broker (``None`` on memory://), whether
    serving without configured permissions must be refused (``True``) or was
    allowed with ``--no-access-control`` (``False``).
    """
    await stack.enter_async_context(plugins_in_process(bus, settings.broker, plugins))
    client = await stack.enter_async_context(ToolServiceClient(bus))
    holder: SessionHolder | None = None
    checkpoints = None
    store: StateStore | None = None
    if settings.state is not None and not settings.broker.startswith("memory:"):
        # Conversations and runs in the store: any replica continues a conversation,
        # and a request whose replica died goes on where it stood on another. One
        # connection, sealed, for them and the door's approvals (shared by URL).
        keys = agent_seal_keys(settings)
        store = await stack.enter_async_context(
            door_state(settings.state, settings.state_options, keys, door=AGENT_DOOR)
        )
        holder = StoredHolder(store)
        checkpoints = RunCheckpoints(store, ttl=limits.time_limit + CHECKPOINT_GRACE)
    # The agent's front door: permissions, entry states, hooks, limits, audit, call checks
    # (approvals wait in the configured store, else in memory).
    door = await stack.enter_async_context(
        opened_door(
            Tools(client, registry),
            local=registry.snapshot,
            settings=settings,
            code_hooks=CodeHooks.installed(),
            holder=holder,
            store=store,
            door_name=AGENT_DOOR,
        )
    )
    if access_control is not None:
        warning = door.require_access_control("toolbus agent serve", allow_off=not access_control)
        if warning is not None:
            typer.echo(f"warning: {warning}", err=True)
    llm: LLM = await connect_llm(llm_url)
    stack.push_async_callback(llm.aclose)
    yield AgentLoop(
        llm,
        DoorConversations(door),
        limits=limits,
        system_prompt=system_prompt,
        metrics=door.metrics,
        checkpoints=checkpoints,
    )


def _limits(max_iterations: int, time_limit: float) -> AgentLimits:
    try:
        return AgentLimits(max_iterations=max_iterations, time_limit=time_limit)
    except ValueError as exc:
        fail(str(exc))


@agent_app.command("serve")
def serve_agent(
    llm: LLMOption = None,
    broker: BrokerOption = None,
    config: ConfigOpt = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Requests this process answers at once.")
    ] = DEFAULT_CONCURRENCY,
    max_iterations: Annotated[
        int, typer.Option(min=1, help="Model turns per request.")
    ] = DEFAULT_MAX_ITERATIONS,
    time_limit: Annotated[
        float, typer.Option(help="Seconds of wall clock per request.")
    ] = DEFAULT_TIME_LIMIT,
    system_prompt: Annotated[
        str | None, typer.Option(metavar="TEXT", help="A system prompt sent first in every chat.")
    ] = None,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds requests in flight may take to finish on shutdown.")
    ] = DEFAULT_DRAIN_TIMEOUT,
    no_access_control: NoAccessControl = False,
    request_queue: RequestQueue = DEFAULT_REQUEST_QUEUE,
    response_queue: ResponseQueue = DEFAULT_RESPONSE_QUEUE,
    event_loop: LoopOption = EventLoop.AUTO,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")] = False,
) -> None:
    """Serve agent requests from the agent queue until SIGTERM or Ctrl-C (which drain).

    Replicas on one broker share the requests (competing consumers), as tool
    services do.
    """
    setup_logging(verbose)
    url = _llm_url(llm)
    if url is None:
        fail(f"no model given: pass --llm URL or set {LLM_VARIABLE} (e.g. openai://gpt-4.1-mini)")
    limits = _limits(max_iterations, time_limit)
    settings, plugins, registry = _plan(broker, config)
    if settings.state is not None and not settings.broker.startswith("memory:"):
        try:  # before connecting anywhere: a door without its seal key stops at once
            agent_seal_keys(settings)
        except ConfigError as exc:
            fail(str(exc))

    async def main() -> None:
        with stop_signals() as stop:
            async with AsyncExitStack() as stack:
                bus = await connect(settings.broker, settings.broker_options)
                stack.push_async_callback(bus.close)
                # Requests come over a broker from anyone who may publish there: without
                # permissions, every one of them could use every tool.
                guarded = None if settings.broker.startswith("memory:") else not no_access_control
                loop = await stack.enter_async_context(
                    _agent(
                        stack,
                        bus,
                        settings,
                        plugins,
                        registry,
                        url,
                        limits,
                        system_prompt,
                        access_control=guarded,
                    )
                )
                service = AgentService(
                    bus,
                    loop,
                    request_queue=request_queue,
                    response_queue=response_queue,
                    concurrency=concurrency,
                    drain_timeout=drain_timeout,
                )
                # Said on the bus while requests are taken: an asker then knows at
                # once whether any agent service answers.
                presence = AgentPresence(bus, request_queue, response_queue)
                async with anyio.create_task_group() as tasks:
                    await tasks.start(service.serve)
                    await tasks.start(presence.run)
                    typer.echo(
                        f"serving agent ({loop.llm.model}) on {request_queue} via "
                        f"{redact_url(settings.broker)}",
                        err=True,
                    )
                    typer.echo(f"event loop: {running_loop_name()}", err=True)
                    settle_heap()  # serving: what is built now stays
                    await stop.wait("finishing requests in flight")
                    presence.stop()  # a draining service takes no new requests
                    service.stop()

    # Spans go to a collector when the OTEL_* variables say so (toolbus[otel]).
    stop_export = export_from_environment("toolbus-agent")
    try:
        run(main, loop=event_loop)
    finally:
        if stop_export is not None:
            stop_export()  # flushes the spans still batched


@app.command("ask")
def ask(
    question: Annotated[str, typer.Argument(help="The question.", show_default=False)],
    user: Annotated[str, typer.Option(help="Who asks; checked against permissions.")] = "cli",
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group", "-g", help="A tool group the agent may use (repeat); default: 'default'."
        ),
    ] = None,
    state: Annotated[
        str, typer.Option(help="The workflow state to start in: an entry state (\\[doors]).")
    ] = "",
    session: Annotated[
        str | None,
        typer.Option(
            metavar="ID",
            help="Continue the conversation an earlier answer named, in the state it reached.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each event as a JSON line.")
    ] = False,
    timeout: Annotated[
        float, typer.Option(help="Seconds to wait for each event from the agent.")
    ] = 120.0,
    broker: BrokerOption = None,
    llm: LLMOption = None,
    config: ConfigOpt = None,
    max_iterations: Annotated[
        int, typer.Option(min=1, help="Model turns (memory:// only: the agent runs here).")
    ] = DEFAULT_MAX_ITERATIONS,
    request_queue: RequestQueue = DEFAULT_REQUEST_QUEUE,
    response_queue: ResponseQueue = DEFAULT_RESPONSE_QUEUE,
    answer: Annotated[
        bool | None,
        typer.Option(
            "--answer/--no-answer",
            help="Answer what a tool asks you (a form) at this terminal. Default: when "
            "standard input is a terminal.",
            show_default=False,
        ),
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")] = False,
) -> None:
    """Ask the agent a question; print the answer as it comes, thoughts and tool calls dimmed.

    On a real broker an agent service (toolbus agent serve) answers. On memory://
    (the default) the agent and the installed plugins' tools run in this process,
    with the model --llm names. A tool that asks you (a confirmation, a detail) is
    answered at the terminal.
    """
    setup_logging(verbose)
    settings, plugins, registry = _plan(broker, config)
    in_process = settings.broker.startswith("memory:")
    url = _llm_url(llm)
    if in_process and url is None:
        fail(
            f"on memory:// the agent runs in this process and needs a model: pass --llm URL "
            f"or set {LLM_VARIABLE} (scripted://demo needs no API key), or --broker for a "
            "broker where 'toolbus agent serve' runs"
        )
    limits = _limits(max_iterations, DEFAULT_TIME_LIMIT)
    request = AgentRequest(
        question=question, user=user, group=group, state=state, session=session, streaming=True
    )
    printer = EventPrinter(as_json=as_json)
    failed = False
    # Said after the event loop ends: an exit raised inside the client's task group
    # would reach the terminal as an exception group.
    problem: tuple[str, str] | None = None  # (kind, message)

    async def main() -> None:
        nonlocal failed, problem
        async with AsyncExitStack() as stack:
            bus = await connect(settings.broker, settings.broker_options)
            stack.push_async_callback(bus.close)
            if in_process:
                assert url is not None
                loop = await stack.enter_async_context(
                    _agent(stack, bus, settings, plugins, registry, url, limits, None)
                )
                service = AgentService(
                    bus,
                    loop,
                    request_queue=request_queue,
                    response_queue=response_queue,
                )
                tasks = await stack.enter_async_context(anyio.create_task_group())
                stack.callback(tasks.cancel_scope.cancel)
                await tasks.start(service.serve)
            else:
                wait = min(PRESENCE_WAIT, timeout)
                if not await agent_service_answers(bus, request_queue, wait):
                    problem = (
                        "no-agent",
                        f"no agent service answers on {request_queue!r} via "
                        f"{redact_url(settings.broker)} (none said so within {wait:g} s); "
                        "start one with 'toolbus agent serve --broker URL'",
                    )
                    return
            agents = await stack.enter_async_context(
                AgentClient(bus, request_queue=request_queue, response_queue=response_queue)
            )
            answering = sys.stdin.isatty() if answer is None else answer
            person = TerminalRelay().answer if answering else None
            try:
                async for event in agents.ask(request, timeout=timeout, answer=person):
                    printer.show(event)
                    failed = failed or event.chunk_type == "error"
            except TimeoutError as exc:
                problem = ("timeout", str(exc))

    run(main)
    if problem is not None:
        kind, message = problem
        if as_json:  # one line a reader of the event lines understands
            printer.show(failure_event(kind, message))
            raise typer.Exit(EXIT_FAILED)
        fail(message, EXIT_FAILED)
    if failed:
        raise typer.Exit(EXIT_FAILED)
