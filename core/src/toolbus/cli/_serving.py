"""Serving tool services until SIGTERM/SIGINT, then draining: ``toolbus serve`` and its kinds.

``toolbus serve SERVICE...`` and every ``toolbus serve KIND`` a distribution
adds end here once they know their services, so that all of them start, print,
announce, probe and drain the same way. Plugins reach it through
:mod:`toolbus.cli.plugin_api`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass
from typing import Any

import anyio
import typer

from toolbus._internal.event_loops import EventLoop, running_loop_name
from toolbus._internal.heap import settle_heap
from toolbus._internal.urls import redact_url
from toolbus.application.calls.advertising import advertised
from toolbus.application.calls.health import ServingHealth
from toolbus.application.calls.host import (
    DEFAULT_CONCURRENCY,
    DEFAULT_DRAIN_TIMEOUT,
    ServiceHost,
)
from toolbus.application.calls.metrics_server import MetricsUnavailable, start_metrics_server
from toolbus.application.calls.service import ToolService
from toolbus.application.identity import CallVerifier
from toolbus.application.identity.replays import (
    PER_REPLICA_TOKEN_AGE,
    StoredReplays,
    per_replica,
)
from toolbus.application.live.announcements import DEFAULT_INTERVAL, Announcer
from toolbus.application.live.companions import alongside
from toolbus.application.live.config_service import ConfigPublisher
from toolbus.application.sealing import SealKeys
from toolbus.application.tracing.export import export_from_environment
from toolbus.cli._common import fail, run
from toolbus.cli._serve_plan import describe
from toolbus.cli._signals import StopSignals, stop_signals
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES
from toolbus.plugins import connect, connect_state, connect_state_beside_broker
from toolbus.ports import Bus, StateStore
from toolbus.settings import Settings

log = logging.getLogger("toolbus.serve")


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How :func:`serve_until_signalled` serves: the options ``toolbus serve`` takes.

    Every field has the default ``toolbus serve`` has, so a command sets only
    what its own flags change.
    """

    #: Calls each service handles at once (``--concurrency``).
    concurrency: int = DEFAULT_CONCURRENCY
    #: Seconds calls in flight may take to finish on shutdown (``--drain-timeout``).
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    #: Prometheus metrics, ``/healthz`` and ``/readyz`` on this port (``--metrics-port``;
    #: needs ``toolbus[metrics]``); None: not served.
    metrics_port: int | None = None
    metrics_addr: str = "127.0.0.1"
    #: Announce each service and its tools, so agents find them with no configuration.
    announce: bool = True
    #: Seconds between announcements; agents drop a service 3 intervals after its last.
    announce_interval: float = DEFAULT_INTERVAL
    #: A snapshot whose tools each service announces as its own (``{"tool": {key:
    #: descriptor}}``, each naming its ``service``); a service with none there
    #: announces the tool derived from its signature.
    defaults: Mapping[str, Any] | None = None
    #: Tool types an announced tool may have (plugins add types).
    tool_types: Iterable[str] = BUILTIN_TOOL_TYPES
    #: Accept only calls this verifier accepts (``--verify-key``).
    verifier: CallVerifier | None = None
    #: Answer unexpected exceptions with their text (development only).
    expose_errors: bool = False
    #: The keys sealing the state of tools that ask their callers (``--seal-key``): the
    #: same on every replica of a service; None: a key of this process's own.
    seal_keys: SealKeys | None = None
    #: Answer every streamed result as one response (``--join-stream``).
    join_stream: bool = False
    #: Runs on the way out, after the services stopped (close an HTTP client, say).
    cleanup: Callable[[], Awaitable[None]] | None = None
    #: What the services need running beside them (a bridged MCP server's connection,
    #: say): entered before they start, left after they drained. An error entering it
    #: stops the command with that error.
    running_beside: Callable[[], AbstractAsyncContextManager[object]] | None = None
    #: The event loop to run on (``--loop``).
    loop: EventLoop = EventLoop.AUTO


def serve_until_signalled(
    settings: Settings, services: Sequence[ToolService], options: ServeOptions | None = None
) -> None:
    """Serve ``services`` on ``settings.broker`` until SIGTERM/SIGINT, then drain and return.

    Prints a line per service on stderr once it is subscribed and announced (a
    supervisor may send SIGTERM as soon as it reads them); on a signal, stops
    announcing first, then lets calls in flight finish for up to
    ``options.drain_timeout`` seconds. A failure exits the command with a
    one-line error and the right exit code.
    """
    options = options or ServeOptions()
    metrics_server = None
    health = ServingHealth()
    if options.metrics_port is not None:
        address = options.metrics_addr
        try:
            metrics_server = start_metrics_server(options.metrics_port, address, readiness=health)
        except (MetricsUnavailable, OSError) as exc:
            fail(f"cannot serve metrics on {address}:{options.metrics_port}: {exc}")
        typer.echo(f"metrics on http://{address}:{metrics_server.port}/metrics", err=True)

    async def main() -> None:
        # Signals are caught from the start: a supervisor may send SIGTERM as soon as
        # it reads the "serving" lines, and one sent while starting waits its turn.
        with stop_signals() as stop:
            async with AsyncExitStack() as beside:
                if options.running_beside is not None:
                    await beside.enter_async_context(options.running_beside())
                bus = await connect(settings.broker, settings.broker_options)
                replays = None
                try:
                    one_process = settings.broker.startswith("memory:")
                    if options.verifier is not None and _serves_once(services) and not one_process:
                        replays = await _remember_replays(settings, options.verifier, services)
                    await serve(bus, stop, None if replays is None else replays[1])
                finally:
                    with anyio.CancelScope(shield=True):
                        await bus.close()
                        if replays is not None and replays[0] is not None:
                            await replays[0].close()
                        if options.cleanup is not None:
                            await options.cleanup()

    async def serve(bus: Bus, stop: StopSignals, replays_said: str | None) -> None:
        hosts = [
            ServiceHost(
                bus,
                s,
                concurrency=options.concurrency,
                drain_timeout=options.drain_timeout,
                verifier=options.verifier,
                expose_errors=options.expose_errors,
                seal_keys=options.seal_keys,
                join_stream=options.join_stream or None,
            )
            for s in services
        ]
        health.attach(bus, hosts)
        async with anyio.create_task_group() as tasks:
            for host in hosts:
                await tasks.start(host.serve)
            # Announcements withdraw when this block ends, before the hosts stop:
            # agents stop choosing a service before it stops taking calls.
            async with (
                alongside(
                    bus,
                    services,
                    announce=options.announce,
                    interval=options.announce_interval,
                    defaults=options.defaults,
                    tool_types=options.tool_types,
                ) as extra,
                advertised(bus, hosts, _announced_tools(extra)) as listed,
            ):
                for host in hosts:
                    typer.echo(
                        f"serving {host.service.id} on {host.service.request_queue} "
                        f"via {redact_url(settings.broker)}",
                        err=True,
                    )
                typer.echo(f"event loop: {running_loop_name()}", err=True)
                settle_heap()  # the hosts are serving: what is built now stays
                if options.verifier is not None:
                    typer.echo(_checks(options.verifier), err=True)
                if replays_said is not None:
                    typer.echo(replays_said, err=True)
                for companion in extra:
                    typer.echo(describe(companion), err=True)
                for advertisement in listed:
                    typer.echo(f"discoverable as {advertisement.where}", err=True)
                await stop.wait("draining calls in flight")
            for host in hosts:
                host.stop()

    # Spans go to a collector when the OTEL_* variables say so (toolbus[otel]).
    stop_export = export_from_environment("+".join(s.id for s in services))
    try:
        run(main, loop=options.loop)
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


def _serves_once(services: Sequence[ToolService]) -> bool:
    """Whether a service reads an at-most-once queue, where a token may be used once."""
    return any(not parse_queue(service.request_queue).persistent for service in services)


async def _remember_replays(
    settings: Settings, verifier: CallVerifier, services: Sequence[ToolService]
) -> tuple[StateStore | None, str]:
    """Where ``verifier`` takes token uses: the configured state store, else the one the
    broker carries (NATS), else this process (with a warning and short-lived tokens).
    The store to close, and the start-up line saying which."""
    if settings.state is not None:
        store = await connect_state(settings.state, settings.state_options)
        where = f"in the state store at {redact_url(settings.state)}"
    else:
        found = await connect_state_beside_broker(settings.broker, settings.broker_options)
        if found is None:
            names = "+".join(service.id for service in services)
            log.warning(per_replica(names, redact_url(settings.broker)))
            verifier.max_token_age = PER_REPLICA_TOKEN_AGE
            return None, (
                "replays refused per replica only: tokens taken for "
                f"{PER_REPLICA_TOKEN_AGE:g} s after signing (name a state store to refuse "
                "them on every replica)"
            )
        store = found
        where = f"on the broker's own servers ({redact_url(settings.broker)})"
    verifier.replays = StoredReplays(store)
    return store, f"replays refused on every replica: token uses remembered {where}"


def _checks(verifier: CallVerifier) -> str:
    """How the services treat callers, for the start-up lines."""
    keys = ", ".join(verifier.key_ids)
    queued = (
        f"; signed calls queued over {verifier.max_queue_age:g} s go to the dead letters "
        "(toolbus dead-letters QUEUE)"
    )
    if verifier.required:
        return f"verifying callers: signed calls only, keys {keys}{queued}"
    return f"verifying callers: keys {keys}; unsigned calls served unverified{queued}"
