"""``toolbus gateway``: serve tools and agent sessions over HTTP, with the console."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import anyio
import typer

from toolbus._internal.event_loops import running_loop_name
from toolbus.cli.plugin_api import (
    EXIT_FAILED,
    BrokerOption,
    CommandLine,
    EventLoop,
    LoopOption,
    VerboseOption,
    fail,
    redact_url,
    run,
    setup_logging,
    stop_signals,
)
from toolbus.plugins import hookimpl
from toolbus_gateway._launch import (
    GRACEFUL_SHUTDOWN,
    GatewayArguments,
    build_gateway,
    http_parser,
)

if TYPE_CHECKING:
    from toolbus_gateway.gateway import Gateway


def gateway(
    broker: BrokerOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
            metavar="PATH",
            help="Tool configuration (snapshot file or directory); default TOOLBUS_CONFIG, "
            "then config in toolbus.toml. With --live, the local layer.",
        ),
    ] = None,
    live: Annotated[
        bool,
        typer.Option("--live", help="Follow the config service and the tools services announce."),
    ] = False,
    listen: Annotated[
        str | None,
        typer.Option(
            metavar="HOST:PORT",
            help="Where to serve; default listen in \\[gateway], 127.0.0.1:8080.",
        ),
    ] = None,
    sign_key: Annotated[
        str | None,
        typer.Option(
            metavar="SOURCE",
            help="Sign every call with this key (a JWK or PEM file, or env:NAME) for services "
            "that verify callers; default sign-key in \\[gateway]. Needs toolbus\\[signing].",
        ),
    ] = None,
    no_access_control: Annotated[
        bool,
        typer.Option(
            "--no-access-control",
            help="Serve even though no permissions are configured: every caller may then use "
            "every tool. Without it, the gateway refuses to start without \\[permissions].",
        ),
    ] = False,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="Worker processes serving the same address. More than one needs a state "
            "store (state in toolbus.toml), where every worker finds the sessions.",
        ),
    ] = 1,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    r"""Serve tools and agent sessions over HTTP to authenticated users, with a live console.

    Callers authenticate with API keys (\[\[credentials.api-keys]] in toolbus.toml)
    or JWTs (\[gateway.jwt]); their groups come from \[permissions]. The API is
    described at /openapi.json; the console is at /console. With state = URL in
    toolbus.toml, sessions live in that store and any replica serves any request.
    """
    import uvicorn

    from toolbus._internal.web_server import CommandServer, bind, cannot_listen
    from toolbus.domain.errors import ConfigError
    from toolbus_gateway.app import create_app

    setup_logging(verbose)
    arguments = GatewayArguments(
        broker=broker,
        config=None if config is None else str(config.resolve()),
        live=live,
        listen=listen,
        sign_key=sign_key,
        no_access_control=no_access_control,
        cwd=str(Path.cwd()),
    )
    try:
        served, host, port = build_gateway(arguments)
    except ConfigError as exc:
        fail(str(exc))
    except ValueError as exc:  # SigningKeyError included
        fail(str(exc))
    if workers > 1 and port == 0:
        fail(
            f"--workers {workers}: the workers share one port, which must be named: "
            "--listen HOST:PORT with a port other than 0"
        )
    if workers > 1 and served.state is None:
        fail(
            f"--workers {workers}: the gateway holds sessions in its process, so each worker "
            "would have sessions of its own and a caller's next request would not find its "
            "session on another worker; name a state store in toolbus.toml (state = "
            '"nats://..." or "redis://...", see docs/deployment.md), or run one worker'
        )
    if workers > 1 and str(served.state).startswith("memory:"):
        fail(
            f"--workers {workers}: state {redact_url(str(served.state))} lives in each "
            "worker's own memory, so the workers would not share sessions; name a state "
            'store they share in toolbus.toml (state = "nats://..." or "redis://..."), or '
            "run one worker"
        )

    stored = "" if served.state is None else f", sessions in {redact_url(str(served.state))}"

    def serving_line(port: int) -> str:
        return (
            f"toolbus gateway on http://{host}:{port} (broker {redact_url(str(served.broker))}"
            f"{stored}); console at /console"
        )

    if workers > 1:
        _serve_with_workers(arguments, served, host, port, workers, serving_line, verbose, loop)
        return

    async def main() -> None:
        with stop_signals() as stop:
            # Connect before serving: a broker that is down, or a bad configuration,
            # is one line on stderr rather than an ASGI start-up traceback.
            async with served:
                if served.warning is not None:
                    typer.echo(f"warning: {served.warning}", err=True)
                typer.echo(
                    f"event loop: {running_loop_name()}; HTTP parser: {http_parser()}", err=True
                )
                try:
                    listener = bind(host, port)
                except OSError as exc:
                    fail(cannot_listen(host, port, exc), EXIT_FAILED)
                server = CommandServer(
                    uvicorn.Config(
                        create_app(served, run_gateway=False),
                        log_level="info" if verbose else "warning",
                        lifespan="on",
                        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN,
                    )
                )
                # Once bound, callers may connect; port 0 had the system choose one.
                typer.echo(serving_line(listener.getsockname()[1]), err=True)
                with listener:
                    async with anyio.create_task_group() as tasks:

                        async def stop_on_signal() -> None:
                            await stop.wait("finishing requests in flight, closing sessions")
                            # Callers waiting on a person or a task are answered first:
                            # they would wait longer than the requests are waited for.
                            await served.stopping()
                            server.shut_down()

                        tasks.start_soon(stop_on_signal)
                        await server.serve(sockets=[listener])
                        tasks.cancel_scope.cancel()
                if not server.started:
                    raise typer.Exit(EXIT_FAILED)  # uvicorn has said why

    run(main, loop=loop)


def _serve_with_workers(
    arguments: GatewayArguments,
    served: Gateway,
    host: str,
    port: int,
    workers: int,
    serving_line: Callable[[int], str],
    verbose: bool,
    loop: EventLoop,
) -> None:
    """``--workers N``: bind here, start the workers, say so once every one accepts."""
    from toolbus._internal.web_server import bind, cannot_listen
    from toolbus_gateway._workers import WorkerFailed, Workers, shared_console_key

    try:
        listener = bind(host, port)
    except OSError as exc:
        fail(cannot_listen(host, port, exc), EXIT_FAILED)
    shared = shared_console_key(arguments, served.settings.console_key_env)
    with listener, Workers(shared, listener, workers, verbose=verbose, loop=str(loop)) as running:
        try:
            lines = running.start()
        except WorkerFailed as exc:
            fail(str(exc), EXIT_FAILED)
        if running.stopped_by is None:
            for line in lines:
                typer.echo(line, err=True)
            typer.echo(serving_line(port), err=True)  # every worker accepts connections
            typer.echo(f"{workers} worker processes", err=True)
            running.serve_until_signalled()
        # Leaving the block stops the workers: each finishes its requests in flight.
        typer.echo(
            f"{running.stopped_by}: finishing requests in flight, closing sessions", err=True
        )


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.command("gateway", gateway)
