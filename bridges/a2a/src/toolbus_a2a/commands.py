"""``toolbus a2a serve`` and ``toolbus serve a2a``: the A2A bridge's commands.

a2a-sdk is imported inside the commands, so ``toolbus --help`` stays quick.
"""

from __future__ import annotations

from typing import Annotated

import typer

from toolbus.cli.plugin_api import (
    EXIT_BAD_INPUT,
    BrokerOption,
    CommandLine,
    EventLoop,
    LoopOption,
    ServeOptions,
    VerboseOption,
    fail,
    run,
    serve_until_signalled,
    setup_logging,
    stop_signals,
)
from toolbus.plugins import hookimpl


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.group("a2a", help="Serve the bus's agents to A2A clients.").command("serve", serve_agents)
    cli.serve_command("a2a", serve_remote_agent)


def serve_agents(
    broker: BrokerOption = None,
    listen: Annotated[str, typer.Option(metavar="HOST:PORT", help="Where to listen.")] = (
        "127.0.0.1:8100"
    ),
    public_url: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="The URL callers reach this door at, as the Agent Cards name it (behind a "
            "load balancer, its URL); default http://HOST:PORT.",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        list[str] | None,
        typer.Option(
            "--agent",
            metavar="NAME",
            help="Serve only the agent of this name (repeat); default: every agent announced.",
            show_default=False,
        ),
    ] = None,
    default: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="The agent whose card is also served at /.well-known/agent-card.json "
            "(default: the only one, when one is served).",
            show_default=False,
        ),
    ] = None,
    discover: Annotated[
        float, typer.Option(min=0.0, help="Seconds to wait at start for agents to announce.")
    ] = 3.0,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve the agent services on the bus as A2A agents (JSON-RPC and HTTP+JSON)."""
    setup_logging(verbose)
    from toolbus._internal.web_server import parse_listen
    from toolbus.application.sealing.doors import SealKeysMissing
    from toolbus.domain.errors import ConfigError
    from toolbus_a2a.serving.running import ListenError, ServeOptions, serve_a2a

    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    if default is not None and agent and default not in agent:
        fail(f"--default {default!r} is not among the --agent names", EXIT_BAD_INPUT)
    options = ServeOptions(
        broker=broker,
        host=host,
        port=port,
        public_url=public_url,
        agents=tuple(agent or ()),
        default=default,
        discover=discover,
    )

    async def main() -> None:
        with stop_signals() as stop:
            await serve_a2a(options, until=lambda: stop.wait("stopping"))

    try:
        run(main, loop=loop)
    except (ConfigError, SealKeysMissing, ListenError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)


def serve_remote_agent(
    url: Annotated[str, typer.Argument(metavar="URL", help="The A2A agent's base URL.")],
    toolset: Annotated[
        str,
        typer.Option(metavar="NAME", help="The service id, and the tool name's prefix."),
    ],
    card_path: Annotated[
        str, typer.Option(metavar="PATH", help="Where the Agent Card is under the URL.")
    ] = "/.well-known/agent-card.json",
    bearer_env: Annotated[
        str | None,
        typer.Option(
            metavar="VARIABLE",
            help="Send Authorization: Bearer with the token in this environment variable.",
            show_default=False,
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=VARIABLE",
            help="HTTP header NAME, its value read from environment variable VARIABLE; repeat.",
            show_default=False,
        ),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group", "-g", help="A tool group the tool is in (repeat); default: default."
        ),
    ] = None,
    broker: BrokerOption = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls handled at once.")] = 16,
    call_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds one message to the agent may take.")
    ] = 120.0,
    connect_timeout: Annotated[
        float, typer.Option(min=0.1, help="Seconds reading the agent's card may take.")
    ] = 30.0,
    announce_interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between announcements.")
    ] = 10.0,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve a remote A2A agent on the bus as one tool that sends it a message."""
    setup_logging(verbose)
    from collections.abc import AsyncIterator
    from contextlib import asynccontextmanager

    from toolbus.domain.calls.naming import sanitize_toolname
    from toolbus.domain.errors import ConfigError
    from toolbus.settings import load_settings
    from toolbus_a2a.importing.address import AgentAddress
    from toolbus_a2a.importing.remote import RemoteAgent

    try:
        settings = load_settings(broker)
        address = AgentAddress.parse(
            url, card_path=card_path, bearer_env=bearer_env, headers=header or ()
        )
    except ConfigError as exc:
        fail(str(exc), EXIT_BAD_INPUT)
    agent = RemoteAgent(
        sanitize_toolname(toolset),
        address,
        groups=tuple(group) if group else None,
        call_timeout=call_timeout,
        connect_timeout=connect_timeout,
    )

    @asynccontextmanager
    async def connected() -> AsyncIterator[None]:
        async with agent.connected():
            typer.echo(
                f"connected to A2A agent {agent.toolset} ({', '.join(agent.tools)}) "
                f"at {address.describe()}",
                err=True,
            )
            yield

    serve_until_signalled(
        settings,
        [agent.service],
        ServeOptions(
            concurrency=concurrency,
            announce_interval=announce_interval,
            running_beside=connected,
            loop=loop,
        ),
    )
