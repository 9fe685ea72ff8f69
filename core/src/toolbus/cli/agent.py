# One job: the agent's commands, which share how the loop is set up over the bus
# (its door, model, state store and suspended runs).
"""``toolbus agent serve`` and ``toolbus ask``: the agent loop on the bus, and asking it."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, aclosing, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import anyio
import typer

from toolbus._internal.event_loops import EventLoop, running_loop_name
from toolbus._internal.heap import settle_heap
from toolbus.application.agent.checkpoints import RunCheckpoints
from toolbus.application.agent.client import AgentClient
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
    AgentService,
    failure_event,
)
from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.tools import Tools
from toolbus.application.doors.conversations import DoorConversations
from toolbus.application.doors.holding import SessionHolder
from toolbus.application.doors.stored import StoredHolder
from toolbus.application.doors.suspended_runs import SuspendedRuns
from toolbus.application.doors.tasks import CLI_DOOR, CallTasks
from toolbus.application.live.agent_presence import (
    AGENT_NAME,
    AgentPresence,
    AgentProfile,
    agent_service_answers,
)
from toolbus.application.sealing import SealKeys
from toolbus.application.sealing.doors import shared_url
from toolbus.application.tasks import TaskBook, TaskRunner
from toolbus.application.tracing.export import export_from_environment
from toolbus.cli._agent_output import EventPrinter
from toolbus.cli._app import app
from toolbus.cli._help import CommandApp
from toolbus.cli._limits import EXIT_LIMITED
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
from toolbus.domain.tasks import parse_task_settings
from toolbus.domain.tasks.settings import SECTION as TASKS_SECTION
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
    settings = _settings(broker, config)
    return (settings, *_tools(settings))


def _settings(broker: str | None, config: str | None) -> Settings:
    try:
        return load_settings(broker, config)
    except ConfigError as exc:
        fail(str(exc))


def _tools(settings: Settings) -> tuple[list[ToolPlugin], Registry]:
    """The installed tool plugins and the configuration, for an agent that runs here."""
    try:
        plugins = load_tool_plugins()
        return plugins, build_registry(settings, plugins)
    except (ConfigError, PluginError) as exc:
        fail(str(exc))


@dataclass(frozen=True, slots=True)
class _Agent:
    """The loop, and where its suspended runs are kept (with a shared store only)."""

    loop: AgentLoop
    runs: SuspendedRuns | None


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
) -> AsyncIterator[_Agent]:
    """A loop over ``bus`` whose sessions the front door opens; on memory:// the
    installed plugins' services run in this process too. With a shared state store,
    runs whose calls wait for approval suspend as tasks any replica goes on with, and
    ``toolbus call --async`` tasks are made here too.

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
    runs = None
    if store is not None and checkpoints is not None and shared_url(settings.state):
        # Entered after the door and the model: the runs going on here are left to
        # another replica before either closes under them.
        task_settings = parse_task_settings(settings.file.get(TASKS_SECTION))
        runner = await stack.enter_async_context(
            TaskRunner(TaskBook(store), shared=True, lease=task_settings.lease)
        )
        calls = CallTasks(door, runner, task_settings)
        runner.on_abandoned = calls.withdraw
        runner.resumes(CLI_DOOR, calls.resume)
        runs = SuspendedRuns(runner, door.book, checkpoints, task_settings)
    loop = AgentLoop(
        llm,
        DoorConversations(door),
        limits=limits,
        system_prompt=system_prompt,
        metrics=door.metrics,
        checkpoints=checkpoints,
        suspensions=runs,
    )
    yield _Agent(loop, runs)


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
    name: Annotated[
        str,
        typer.Option(
            help="The agent's name in its announcements (an A2A door serves it under it); "
            "one per agent on a broker.",
        ),
    ] = AGENT_NAME,
    description: Annotated[
        str, typer.Option(metavar="TEXT", help="What the agent does, for the doors that show it.")
    ] = "",
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
            parse_task_settings(settings.file.get(TASKS_SECTION))
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
                agent = await stack.enter_async_context(
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
                loop, runs = agent.loop, agent.runs
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
                profile = AgentProfile.of(registry, name=name, description=description)
                presence = AgentPresence(bus, request_queue, response_queue, profile=profile)
                async with anyio.create_task_group() as tasks:
                    await tasks.start(service.serve)
                    if runs is not None:  # suspended runs go on here, or on another replica
                        await tasks.start(runs.serve, service)
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
                    if runs is not None:
                        runs.stop()  # the runs suspended stay for the other replicas

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
        float,
        typer.Option(
            help="Seconds to wait for each event from the agent (while the run waits for an "
            "approval: until the approval expires, and this long beyond)."
        ),
    ] = 120.0,
    no_wait: Annotated[
        bool,
        typer.Option(
            "--no-wait",
            help="When the run waits for a person's approval, print its task id and exit 0 "
            "instead of waiting; 'toolbus tasks show ID' tells how it went.",
        ),
    ] = False,
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

    A run whose tool call waits for a person's approval says "waiting for approval
    by ..." and the task it became; ask waits for the answer (from whichever agent
    replica goes on with the run), or with --no-wait prints the task id and exits.
    """
    setup_logging(verbose)
    settings = _settings(broker, config)
    in_process = settings.broker.startswith("memory:")
    if in_process and no_wait:
        fail(
            "--no-wait: on memory:// the agent runs in this command, which must stay to run "
            "it; ask an agent service on a broker (--broker URL) that keeps its runs in a "
            "shared state store"
        )
    url = _llm_url(llm)
    if in_process and url is None:
        fail(
            f"on memory:// the agent runs in this process and needs a model: pass --llm URL "
            f"or set {LLM_VARIABLE} (scripted://demo needs no API key), or --broker for a "
            "broker where 'toolbus agent serve' runs"
        )
    # Only an agent running here needs the tools: on a broker, loading every installed
    # plugin (the OpenAPI toolset's HTTP and schema libraries among them) was most of
    # what the asker spent before even looking for an agent service.
    plugins, registry = _tools(settings) if in_process else ([], None)
    limits = _limits(max_iterations, DEFAULT_TIME_LIMIT)
    request = AgentRequest(
        question=question, user=user, group=group, state=state, session=session, streaming=True
    )
    # With --no-wait, stdout carries the answer, or the task id of a run that waits.
    printer = EventPrinter(as_json=as_json, steps_on_stderr=no_wait)
    failed = False
    limited = False  # a spent budget ended it: try again later
    # Said after the event loop ends: an exit raised inside the client's task group
    # would reach the terminal as an exception group.
    problem: tuple[str, str] | None = None  # (kind, message)

    async def main() -> None:
        nonlocal failed, limited, problem
        async with AsyncExitStack() as stack:
            bus = await connect(settings.broker, settings.broker_options)
            stack.push_async_callback(bus.close)
            if in_process:
                assert url is not None and registry is not None
                agent = await stack.enter_async_context(
                    _agent(stack, bus, settings, plugins, registry, url, limits, None)
                )
                service = AgentService(
                    bus,
                    agent.loop,
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
                async with aclosing(agents.ask(request, timeout=timeout, answer=person)) as events:
                    async for event in events:
                        printer.show(event)
                        failed = failed or event.chunk_type == "error"
                        limited = limited or (
                            event.error is not None and event.error.type == "budget-spent"
                        )
                        if no_wait and event.task is not None:
                            if not as_json:  # the JSON line holds it already
                                typer.echo(event.task.id)
                            return  # the run goes on as its task, without this command
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
        raise typer.Exit(EXIT_LIMITED if limited else EXIT_FAILED)
