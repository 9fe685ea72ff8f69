"""The ``toolbus serve`` command: run tool services until SIGTERM/SIGINT, then drain and exit.

Which services that means, and what each announces, is planned in
:mod:`toolbus.cli._serve_plan`; serving them is
:func:`~toolbus.cli.plugin_api.serve_until_signalled`, as for every ``toolbus serve KIND``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from toolbus.application.calls.host import DEFAULT_CONCURRENCY, DEFAULT_DRAIN_TIMEOUT
from toolbus.application.identity import CallVerifier, SigningKeyError
from toolbus.application.identity.verifying import DEFAULT_MAX_QUEUE_AGE
from toolbus.application.sealing import SealKeyError, load_seal_keys
from toolbus.cli._app import SERVE_SERVICES, serve_app
from toolbus.cli._serve_plan import plan_services
from toolbus.cli.plugin_api import (
    BrokerOption,
    EventLoop,
    LoopOption,
    ServeOptions,
    VerboseOption,
    fail,
    serve_until_signalled,
    setup_logging,
)
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.settings import load_settings


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
    broker: BrokerOption = None,
    concurrency: Annotated[
        int, typer.Option(min=1, help="Calls each service handles at once.")
    ] = DEFAULT_CONCURRENCY,
    drain_timeout: Annotated[
        float,
        typer.Option(min=0.0, help="Seconds calls in flight may take to finish on shutdown."),
    ] = DEFAULT_DRAIN_TIMEOUT,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            help="Expose Prometheus metrics on http://ADDR:PORT/metrics, and /healthz and "
            "/readyz for probes (needs toolbus\\[metrics])."
        ),
    ] = None,
    metrics_addr: Annotated[
        str, typer.Option(metavar="ADDR", help="Address for --metrics-port.")
    ] = "127.0.0.1",
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
            metavar="SOURCE",
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
    max_queue_age: Annotated[
        float,
        typer.Option(
            min=1.0,
            help="With --verify-key: seconds a signed call may have waited in a persistent "
            "queue and still be served (its token is checked as of when the broker took "
            "it); older calls go to the queue's dead letters (toolbus dead-letters QUEUE).",
        ),
    ] = DEFAULT_MAX_QUEUE_AGE,
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
    seal_key: Annotated[
        list[str] | None,
        typer.Option(
            metavar="SOURCE",
            help="Seal the state of tools that ask their callers with this key (a JWK file "
            "from toolbus keys new --algorithm A256GCM, or env:VARIABLE; repeatable, the "
            "first seals, every one opens): give every replica of a service the same keys. "
            r"Needs toolbus\[seal]. Default: a key of this process's own.",
            show_default=False,
        ),
    ] = None,
    loop: LoopOption = EventLoop.AUTO,
    verbose: VerboseOption = False,
) -> None:
    """Serve tool services (the default: toolbus serve SERVICE...)."""
    setup_logging(verbose)
    if allow_unsigned and not verify_key:
        fail("--allow-unsigned relaxes --verify-key: give the keys to verify with too")
    try:
        verifier = (
            CallVerifier.load(verify_key, required=not allow_unsigned, max_queue_age=max_queue_age)
            if verify_key
            else None
        )
    except SigningKeyError as exc:
        fail(str(exc))
    try:
        seal_keys = load_seal_keys(seal_key) if seal_key else None
    except SealKeyError as exc:
        fail(str(exc))
    try:
        settings = load_settings(broker)
        plan = plan_services(
            services, settings, store=store, announce=announce, interval=announce_interval
        )
    except (ConfigError, PluginError) as exc:
        fail(str(exc))
    serve_until_signalled(
        settings,
        plan.services,
        ServeOptions(
            concurrency=concurrency,
            drain_timeout=drain_timeout,
            metrics_port=metrics_port,
            metrics_addr=metrics_addr,
            announce=plan.announce,
            announce_interval=plan.interval,
            defaults=plan.defaults,
            tool_types=plan.tool_types,
            verifier=verifier,
            expose_errors=expose_errors,
            join_stream=join_stream,
            seal_keys=seal_keys,
            loop=loop,
        ),
    )
