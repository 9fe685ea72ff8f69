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
    VerboseOption,
    fail,
    run,
    setup_logging,
    stop_signals,
)
from toolbus.plugins import hookimpl


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.group("a2a", help="Serve the bus's agents to A2A clients.").command("serve", serve_agents)


def _listen(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        fail(f"--listen {listen!r}: give HOST:PORT, e.g. 127.0.0.1:8100", EXIT_BAD_INPUT)
    return host, int(port)


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
    from toolbus.application.sealing.doors import SealKeysMissing
    from toolbus.domain.errors import ConfigError
    from toolbus_a2a.serving.running import ListenError, ServeOptions, serve_a2a

    host, port = _listen(listen)
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
