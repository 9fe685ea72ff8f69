"""``toolbus gateway``: serve tools and agent sessions over HTTP, with the console."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolbus.cli.plugin_api import (
    BrokerOption,
    CommandLine,
    VerboseOption,
    fail,
    redact_url,
    run,
    setup_logging,
)
from toolbus.plugins import hookimpl


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:8080`` for IPv6) as host and port; ValueError says what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {listen!r} is not HOST:PORT, e.g. 127.0.0.1:8080")
    return host.strip("[]"), int(port)


def gateway(
    broker: BrokerOption = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            "-c",
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
        typer.Option(help="HOST:PORT to serve on; default listen in \\[gateway], 127.0.0.1:8080."),
    ] = None,
    sign_key: Annotated[
        str | None,
        typer.Option(
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
    verbose: VerboseOption = False,
) -> None:
    r"""Serve tools and agent sessions over HTTP to authenticated users, with a live console.

    Callers authenticate with API keys (\[\[credentials.api-keys]] in toolbus.toml)
    or JWTs (\[gateway.jwt]); their groups come from \[permissions]. The API is
    described at /openapi.json; the console is at /console.
    """
    import uvicorn

    from toolbus.application.identity.credentials import load_credentials
    from toolbus.application.identity.signing import CallSigner
    from toolbus.domain.errors import ConfigError
    from toolbus.settings import load_settings
    from toolbus_gateway.app import create_app
    from toolbus_gateway.auth import Authenticator, JwtVerifier
    from toolbus_gateway.gateway import Gateway
    from toolbus_gateway.settings import parse_gateway_settings

    setup_logging(verbose)
    try:
        settings = load_settings(broker=broker, config=config)
        table = settings.file.get("gateway")
        gateway_settings = parse_gateway_settings(table)
        host, port = parse_listen(listen or gateway_settings.listen)
        base = Path.cwd()
        credentials = load_credentials(settings=settings.file, base_dir=base)
        verifier = (
            None
            if gateway_settings.jwt is None
            else JwtVerifier.from_settings(gateway_settings.jwt, base_dir=base)
        )
        authenticator = Authenticator(credentials, verifier)
        source = sign_key or gateway_settings.sign_key
        signer = None if source is None else CallSigner.load(source, issuer="toolbus-gateway")
        if settings.config is None and not live:
            fail(
                "no tool configuration: pass --config PATH (or set TOOLBUS_CONFIG, or config "
                "in toolbus.toml), or --live to take tools from the bus"
            )
        served = Gateway(
            settings.broker,
            authenticator=authenticator,
            config=settings.config,
            live=live,
            settings=gateway_settings,
            settings_file=settings.file,
            broker_options=settings.broker_options,
            signer=signer,
            access_control=not no_access_control,
            base_dir=settings.file_path.parent if settings.file_path is not None else base,
        )
    except ConfigError as exc:
        fail(str(exc))
    except ValueError as exc:  # SigningKeyError included
        fail(str(exc))

    typer.echo(
        f"toolbus gateway on http://{listen or gateway_settings.listen} "
        f"(broker {redact_url(settings.broker)}); console at /console",
        err=True,
    )

    async def main() -> None:
        # Connect before serving: a broker that is down, or a bad configuration,
        # is one line on stderr rather than an ASGI start-up traceback.
        async with served:
            if served.warning is not None:
                typer.echo(f"warning: {served.warning}", err=True)
            server = uvicorn.Server(
                uvicorn.Config(
                    create_app(served, run_gateway=False),
                    host=host,
                    port=port,
                    log_level="info" if verbose else "warning",
                    lifespan="on",
                )
            )
            await server.serve()
            if not server.started:
                raise typer.Exit(1)  # uvicorn has said why (the port is taken, say)

    run(main)


@hookimpl
def toolbus_register_commands(cli: CommandLine) -> None:
    cli.command("gateway", gateway)
