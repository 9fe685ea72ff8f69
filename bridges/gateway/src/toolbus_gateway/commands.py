"""``toolbus gateway``: serve tools and agent sessions over HTTP, with the console."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import asdict, dataclass
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

if TYPE_CHECKING:
    from toolbus_gateway.gateway import Gateway

#: Seconds requests in flight may take to finish once the gateway is told to stop.
GRACEFUL_SHUTDOWN = 30


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as host and port; ValueError says what is wrong.

    Port 0 has the system choose a free port, which the start-up line names.
    """
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--listen {listen!r} is not HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


#: The environment variable a worker process reads its command line from (``--workers``).
WORKER_ARGUMENTS = "TOOLBUS_GATEWAY_WORKER"


@dataclass(frozen=True, slots=True)
class GatewayArguments:
    """What ``toolbus gateway`` was asked for: enough for a worker process to build the same."""

    broker: str | None = None
    config: str | None = None
    live: bool = False
    listen: str | None = None
    sign_key: str | None = None
    no_access_control: bool = False
    cwd: str = "."

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> GatewayArguments:
        return cls(**json.loads(text))


def build_gateway(arguments: GatewayArguments) -> tuple[Gateway, str, int]:
    """The :class:`~toolbus_gateway.gateway.Gateway` the arguments describe, and where it
    listens. ConfigError and ValueError say what is wrong."""
    from toolbus.application.identity.bearer import Authenticator
    from toolbus.application.identity.credentials import load_credentials
    from toolbus.application.identity.signing import CallSigner
    from toolbus.runtime import seal_keys_of
    from toolbus.settings import load_settings
    from toolbus_gateway.gateway import Gateway
    from toolbus_gateway.settings import parse_gateway_settings

    config = None if arguments.config is None else Path(arguments.config)
    settings = load_settings(broker=arguments.broker, config=config)
    gateway_settings = parse_gateway_settings(settings.file.get("gateway"))
    host, port = parse_listen(arguments.listen or gateway_settings.listen)
    base = Path(arguments.cwd)
    credentials = load_credentials(settings=settings.file, base_dir=base)
    authenticator = Authenticator.from_settings(
        credentials,
        gateway_settings.jwt,
        where="toolbus.toml [gateway.jwt]",
        door="toolbus gateway",
        base_dir=base,
    )
    source = arguments.sign_key or gateway_settings.sign_key
    signer = None if source is None else CallSigner.load(source, issuer="toolbus-gateway")
    if settings.config is None and not arguments.live:
        raise ValueError(
            "no tool configuration: pass --config PATH (or set TOOLBUS_CONFIG, or config "
            "in toolbus.toml), or --live to take tools from the bus"
        )
    served = Gateway(
        settings.broker,
        authenticator=authenticator,
        config=settings.config,
        live=arguments.live,
        settings=gateway_settings,
        settings_file=settings.file,
        broker_options=settings.broker_options,
        signer=signer,
        access_control=not arguments.no_access_control,
        base_dir=settings.file_path.parent if settings.file_path is not None else base,
        state=settings.state,
        state_options=settings.state_options,
        seal_keys=seal_keys_of(settings, base, door="toolbus gateway", url=settings.state),
    )
    return served, host, port


def http_parser() -> str:
    """The HTTP parser uvicorn serves with: httptools (C) when installed, else h11."""
    return "httptools" if importlib.util.find_spec("httptools") is not None else "h11"


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
        typer.echo(serving_line(port), err=True)
        # Each worker builds the gateway again from the same arguments, and enters it
        # in its app's lifespan: the broker and the store are each worker's own.
        os.environ[WORKER_ARGUMENTS] = arguments.to_json()
        typer.echo(f"{workers} worker processes", err=True)
        uvicorn.run(
            "toolbus_gateway._workers:app",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level="info" if verbose else "warning",
            lifespan="on",
            loop=str(loop),
        )
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


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.command("gateway", gateway)
