"""``toolbus mcp serve`` and ``toolbus serve mcp``: the MCP bridge's commands.

The MCP SDK is imported inside the commands, so ``toolbus --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
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
    cli.group("mcp", help="Serve bus tools to MCP clients.").command("serve", serve_bus_tools)
    cli.serve_command("mcp", serve_toolset)


def serve_bus_tools(
    broker: BrokerOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="PATH",
            help="Configuration file or directory. Without it the tools follow the config "
            "service and announcements (live).",
        ),
    ] = None,
    live: Annotated[
        bool | None,
        typer.Option(
            "--live/--no-live",
            help="Follow the config service and announcements; default: on unless --config.",
            show_default=False,
        ),
    ] = None,
    transport: Annotated[
        str,
        typer.Option(
            metavar="stdio|http",
            help="stdio (one client on stdin/stdout) or http (streamable HTTP).",
        ),
    ] = "stdio",
    listen: Annotated[
        str, typer.Option(metavar="HOST:PORT", help="Where --transport http listens.")
    ] = "127.0.0.1:8000",
    user: Annotated[str, typer.Option(help="stdio: the user calls are made for.")] = "mcp",
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group", "-g", help="stdio: a tool group to offer (repeat); default: default."
        ),
    ] = None,
    state: Annotated[
        str | None, typer.Option(help="stdio: the initial workflow state, an entry state.")
    ] = None,
    timeout: Annotated[float, typer.Option(help="Seconds each tool call may take.")] = 60.0,
    sign_key: Annotated[
        str | None,
        typer.Option(
            metavar="SOURCE",
            help="Sign every call with the caller's user and groups, with this private key: a "
            "JWK or PEM file, or env:VARIABLE (needs toolbus\\[signing]). Services that verify "
            "callers require it.",
            show_default=False,
        ),
    ] = None,
    no_access_control: Annotated[
        bool,
        typer.Option(
            "--no-access-control",
            help="http: serve even though no permissions are configured (every caller may "
            "then use every tool); without it, http refuses to start without \\[permissions].",
        ),
    ] = False,
    json_response: Annotated[
        bool,
        typer.Option(
            "--json-response",
            help="http: answer every request with one JSON body rather than an event "
            "stream: less work per call, but no keep-alive pings while a call runs, and a "
            "call whose client hangs up runs to its end.",
        ),
    ] = False,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve the bus's tools to MCP clients, filtered per caller like an agent session."""
    setup_logging(verbose)
    if transport not in ("stdio", "http"):
        fail(f"--transport must be stdio or http, not {transport!r}")
    from toolbus.application.identity.keys import SigningKeyError
    from toolbus.application.identity.signing import CallSigner
    from toolbus_mcp.serving.running import ServeOptions, serve_bus

    try:
        signer = None if sign_key is None else CallSigner.load(sign_key)
    except SigningKeyError as exc:
        fail(str(exc))

    options = ServeOptions(
        broker=broker,
        config=config,
        live=config is None if live is None else live,
        transport="http" if transport == "http" else "stdio",
        listen=listen,
        user=user,
        groups=None if not group else tuple(group),
        state=state,
        timeout=timeout,
        signer=signer,
        no_access_control=no_access_control,
        json_response=json_response,
    )

    async def main() -> None:
        with stop_signals() as stop:
            await serve_bus(options, until=lambda: stop.wait("stopping"))

    run(main, loop=loop)


def serve_toolset(
    toolset: Annotated[
        str,
        typer.Option(
            metavar="NAME",
            help="The toolset's name: the service id and every tool name's prefix.",
        ),
    ],
    command: Annotated[
        str | None, typer.Option(help='Start this MCP server (stdio), e.g. "npx some-server".')
    ] = None,
    url: Annotated[
        str | None, typer.Option(help="Connect to this streamable HTTP MCP server.")
    ] = None,
    env: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME[=SOURCE]",
            help="Pass environment variable NAME (or NAME=SOURCE: NAME set from SOURCE) to the "
            "started server; repeat.",
        ),
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option(
            metavar="NAME=SOURCE",
            help="HTTP header NAME=SOURCE, its value read from variable SOURCE; repeat.",
        ),
    ] = None,
    oauth_issuer: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="--url's server wants OAuth tokens: get them from this authorization server "
            "by the client-credentials grant (the credentials are sent nowhere else).",
        ),
    ] = None,
    oauth_client_id: Annotated[
        str | None,
        typer.Option(metavar="VAR", help="The environment variable holding the client id."),
    ] = None,
    oauth_client_secret: Annotated[
        str | None,
        typer.Option(metavar="VAR", help="The environment variable holding the client secret."),
    ] = None,
    oauth_scope: Annotated[
        str | None,
        typer.Option(metavar="SCOPES", help="The scopes to ask for (space-separated)."),
    ] = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group", "-g", help="A tool group every tool is in (repeat); default: default."
        ),
    ] = None,
    broker: BrokerOption = None,
    concurrency: Annotated[int, typer.Option(min=1, help="Calls handled at once.")] = 16,
    call_timeout: Annotated[float, typer.Option(help="Seconds one MCP tool call may take.")] = 60.0,
    connect_timeout: Annotated[
        float, typer.Option(help="Seconds starting or reaching the server may take.")
    ] = 30.0,
    announce_interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between announcements.")
    ] = 10.0,
    relist_interval: Annotated[
        float,
        typer.Option(min=0.0, help="Seconds at least between listings of the server's tools."),
    ] = 1.0,
    max_tools: Annotated[
        int, typer.Option(min=1, help="Tools served at most; a server listing more is refused.")
    ] = 1000,
    max_pages: Annotated[
        int, typer.Option(min=1, help="Pages of the server's tool list read at most.")
    ] = 100,
    approve: Annotated[
        str,
        typer.Option(
            help="Which tools need a person's approval: none, destructive (as the tools' MCP "
            "hints say) or all.",
        ),
    ] = "none",
    verify_key: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SOURCE",
            help="Accept only calls signed by one of these public keys (a JWK, JWK Set or PEM "
            "file, or env:VARIABLE; repeatable). Needs toolbus\\[signing].",
            show_default=False,
        ),
    ] = None,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve an MCP server's tools on the bus, announced as TOOLSET_TOOL."""
    setup_logging(verbose)
    from toolbus.application.identity.keys import SigningKeyError
    from toolbus.application.identity.verifying import CallVerifier
    from toolbus.domain.errors import ConfigError
    from toolbus.settings import load_settings
    from toolbus_mcp.importing.addresses import McpServerAddress
    from toolbus_mcp.importing.toolsets import McpToolset
    from toolbus_mcp.importing.translation import APPROVE_CHOICES

    if approve not in APPROVE_CHOICES:
        fail(f"--approve {approve!r}: use one of {', '.join(APPROVE_CHOICES)}")
    try:
        verifier = CallVerifier.load(verify_key) if verify_key else None
    except SigningKeyError as exc:
        fail(str(exc))
    try:
        settings = load_settings(broker)
        address = McpServerAddress.parse(
            command=command,
            url=url,
            env=env or (),
            headers=header or (),
            oauth_issuer=oauth_issuer,
            oauth_client_id=oauth_client_id,
            oauth_client_secret=oauth_client_secret,
            oauth_scope=oauth_scope,
        )
        bridge = McpToolset(
            toolset,
            address,
            groups=tuple(group) if group else None,
            call_timeout=call_timeout,
            connect_timeout=connect_timeout,
            relist_interval=relist_interval,
            max_tools=max_tools,
            max_pages=max_pages,
            approve=approve,
        )
    except (ConfigError, ValueError) as exc:
        fail(str(exc), EXIT_BAD_INPUT)

    @asynccontextmanager
    async def connected() -> AsyncIterator[None]:
        async with bridge.connected():
            typer.echo(
                f"connected to MCP toolset {toolset} ({', '.join(bridge.tools) or 'no tools'}) "
                f"at {address.describe()}",
                err=True,
            )
            yield

    serve_until_signalled(
        settings,
        [bridge.service],
        ServeOptions(
            concurrency=concurrency,
            announce_interval=announce_interval,
            verifier=verifier,
            running_beside=connected,
            loop=loop,
        ),
    )
