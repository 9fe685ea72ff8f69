"""The ``toolbus serve`` command: run tool services until SIGTERM/SIGINT, then drain and exit.

Which services that means, and what each announces, is planned in
:mod:`toolbus.cli.serve_plan`.
"""

from __future__ import annotations

import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import anyio
import typer

from toolbus._internal.event_loops import EventLoop, running_loop_name
from toolbus.application.calls.advertising import advertised
from toolbus.application.calls.health import ServingHealth
from toolbus.application.calls.host import DEFAULT_CONCURRENCY, ServiceHost
from toolbus.application.calls.metrics import MetricsUnavailable, start_metrics_server
from toolbus.application.calls.service import ToolService
from toolbus.application.identity import CallVerifier, SigningKeyError
from toolbus.application.live.announcements import Announcer
from toolbus.application.live.companions import alongside
from toolbus.application.live.config_service import ConfigPublisher
from toolbus.application.tracing.export import export_from_environment
from toolbus.cli.app import SERVE_SERVICES, serve_app
from toolbus.cli.common import LoopOption, fail, redact_url, run, setup_logging
from toolbus.cli.serve_plan import describe, plan_services
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.plugins import connect
from toolbus.settings import Settings, load_settings


@serve_app.command(SERVE_SERVICES)
def serve(
    services: Annotated[
        list[str],
        typer.Argument(
            help="Services to run: an installed plugin's service id (joke-service), "
            "an import path (my_package.tools:my_service), or 'config' for the config service.",
            show_default=False,
        ),
    ],
    broker: Annotated[
        str | None, typer.Option(help="Broker URL; default from TOOLBUS_BROKER or toolbus.toml.")
    ] = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Calls each service handles at once.")
    ] = DEFAULT_CONCURRENCY,
    drain_timeout: Annotated[
        float,
        typer.Option(min=0.0, help="Seconds calls in flight may take to finish on shutdown."),
    ] = 30.0,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Expose Prometheus metrics on http://ADDR:PORT/metrics, and /healthz and "
            "/readyz for probes (needs toolbus\\[metrics])."
        ),
    ] = None,
    metrics_addr: Annotated[str, typer.Option(help="Address for --metrics-port.")] = "127.0.0.1",
    store: Annotated[
        Path | None,
        typer.Option(
            help="The config service's store file (created if missing); default "
            "TOOLBUS_CONFIG_STORE or \\[config-service] store in toolbus.toml.",
            show_default=False,
        ),
    ] = None,
    announce: Annotated[
        bool | None,
        typer.Option(
            "--announce/--no-announce",
            help="Announce each service and its tools, so agents can call them with no "
            "configuration. Default: on (\\[announcements] enabled in toolbus.toml).",
            show_default=False,
        ),
    ] = None,
    announce_interval: Annotated[
        float | None,
        typer.Option(
            min=0.1,
            help="Seconds between announcements; agents drop a service 3 intervals after "
            "its last one. Default: 10 (\\[announcements] interval in toolbus.toml).",
            show_default=False,
        ),
    ] = None,
    verify_key: Annotated[
        list[str] | None,
        typer.Option(
            help="Verify callers: accept only calls signed by one of these public keys (a "
            "JWK, JWK Set or PEM file, or env:VARIABLE; repeatable, for rotation). Needs "
            "toolbus\\[signing].",
            show_default=False,
        ),
    ] = None,
    allow_unsigned: Annotated[
        bool,
        typer.Option(
            help="With --verify-key: also serve unsigned calls, unverified (while callers "
            "switch to signing).",
        ),
    ] = False,
    expose_errors: Annotated[
        bool,
        typer.Option(
            help="Answer unexpected exceptions with their text, not a log reference "
            "(development only: the text may hold secrets).",
        ),
    ] = False,
    join_stream: Annotated[
        bool,
        typer.Option(
            help="Answer every streamed result as one response, for callers that keep only "
            "the first (TrustGraph's non-streaming ToolServiceClient.call).",
        ),
    ] = False,
    loop: LoopOption = EventLoop.AUTO,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log at INFO level.")] = False,
) -> None:
    """Serve tool services (the default: toolbus serve SERVICE...)."""
    setup_logging(verbose)
    if allow_unsigned and not verify_key:
        fail("--allow-unsigned relaxes --verify-key: give the keys to verify with too")
    try:
        verifier = (
            CallVerifier.load(verify_key, required=not allow_unsigned) if verify_key else None
        )
    except SigningKeyError as exc:
        fail(str(exc))
    try:
        settings = load_settings(broker)
        plan = plan_services(
            services, settings, store=store, announce=announce, interval=announce_interval
        )
        resolved = plan.services
    except (ConfigError, PluginError) as exc:
        fail(str(exc))
    run_until_signalled(
        settings,
        resolved,
        concurrency=concurrency,
        drain_timeout=drain_timeout,
        metrics_port=metrics_port,
        metrics_addr=metrics_addr,
        companions=plan.alongside_options(),
        verifier=verifier,
        expose_errors=expose_errors,
        join_stream=join_stream,
        loop=loop,
    )


def run_until_signalled(
    settings: Settings,
    services: Sequence[ToolService],
    *,
    concurrency: int = DEFAULT_CONCURRENCY,
    drain_timeout: float = 30.0,
    metrics_port: int | None = None,
    metrics_addr: str = "127.0.0.1",
    companions: Mapping[str, Any] | None = None,
    verifier: CallVerifier | None = None,
    expose_errors: bool = False,
    join_stream: bool = False,
    cleanup: Callable[[], Awaitable[None]] | None = None,
    loop: EventLoop = EventLoop.AUTO,
) -> None:
    """Serve ``services`` on ``settings.broker`` until SIGTERM/SIGINT, then drain and return.

    What ``toolbus serve`` does once it knows its services; commands that serve
    other kinds of tools (``toolbus serve KIND``) call it too. ``companions``
    are the options of :func:`~toolbus.application.live.companions.alongside`;
    ``verifier``, ``expose_errors`` and ``join_stream`` (answer streams joined)
    go to each :class:`~toolbus.application.calls.host.ServiceHost`; ``cleanup`` runs on
    the way out, after the services stopped; ``loop`` is the event loop to run on
    (``--loop``).
    """
    metrics_server = None
    health = ServingHealth()
    if metrics_port is not None:
        try:
            metrics_server = start_metrics_server(metrics_port, metrics_addr, readiness=health)
        except (MetricsUnavailable, OSError) as exc:
            fail(f"cannot serve metrics on {metrics_addr}:{metrics_port}: {exc}")
        typer.echo(f"metrics on http://{metrics_addr}:{metrics_server.port}/metrics", err=True)

    async def main() -> None:
        bus = await connect(settings.broker, settings.broker_options)
        hosts = [
            ServiceHost(
                bus,
                s,
                concurrency=concurrency,
                drain_timeout=drain_timeout,
                verifier=verifier,
                expose_errors=expose_errors,
                join_stream=join_stream or None,
            )
            for s in services
        ]
        health.attach(bus, hosts)
        try:
            # Signals are caught before anything is announced: a supervisor may send
            # SIGTERM as soon as it reads the "serving" lines.
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with anyio.create_task_group() as tasks:
                    for host in hosts:
                        await tasks.start(host.serve)
                    # Announcements withdraw when this block ends, before the hosts stop:
                    # agents stop choosing a service before it stops taking calls.
                    async with (
                        alongside(bus, services, **(companions or {})) as extra,
                        advertised(bus, hosts, _announced_tools(extra)) as listed,
                    ):
                        for host in hosts:
                            typer.echo(
                                f"serving {host.service.id} on {host.service.request_queue} "
                                f"via {redact_url(settings.broker)}",
                                err=True,
                            )
                        typer.echo(f"event loop: {running_loop_name()}", err=True)
                        if verifier is not None:
                            typer.echo(_checks(verifier), err=True)
                        for companion in extra:
                            typer.echo(describe(companion), err=True)
                        for advertisement in listed:
                            typer.echo(f"discoverable as {advertisement.where}", err=True)
                        async for signum in signals:
                            typer.echo(
                                f"{signal.Signals(signum).name}: draining calls in flight",
                                err=True,
                            )
                            break
                    for host in hosts:
                        host.stop()
        finally:
            with anyio.CancelScope(shield=True):
                await bus.close()
                if cleanup is not None:
                    await cleanup()

    # Spans go to a collector when the OTEL_* variables say so (toolbus[otel]).
    stop_export = export_from_environment("+".join(s.id for s in services))
    try:
        run(main, loop=loop)
    finally:
        if metrics_server is not None:
            metrics_server.close()
        if stop_export is not None:
            stop_export()  # flushes the spans still batched


def _announced_tools(companions: Sequence[Announcer | ConfigPublisher]) -> dict[str, list[str]]:
    """The names of the tools each announced service offers, by service id."""
    return {
        companion.service.id: [
            str(tool.get("name", key)) for key, tool in companion.announcement.tools.items()
        ]
        for companion in companions
        if isinstance(companion, Announcer)
    }


def _checks(verifier: CallVerifier) -> str:
    """How the services treat callers, for the start-up lines."""
    keys = ", ".join(verifier.key_ids)
    if verifier.required:
        return f"verifying callers: signed calls only, keys {keys}"
    return f"verifying callers: keys {keys}; unsigned calls served unverified"
