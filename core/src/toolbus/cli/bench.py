"""``toolbus bench``: tool-call latency and throughput on your own broker."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Annotated

import typer

from toolbus._internal.event_loops import EventLoop, resolve
from toolbus.benchmark import Figure, bench_broker
from toolbus.cli._app import app
from toolbus.cli.plugin_api import BrokerOption, LoopOption, fail, redact_url, run
from toolbus.domain.errors import PluginError
from toolbus.settings import load_settings


def _progress_line(level: int, seconds: float) -> Callable[[int], None]:
    def show(done: int) -> None:
        typer.echo(f"\r  {level:>3} in flight: {done:>9,} calls …", nl=False, err=True)

    return show


def table(figures: list[Figure]) -> str:
    lines = [
        f"{'in flight':>9}  {'calls/s':>10}  {'p50 ms':>8}  {'p99 ms':>8}  {'calls':>9}  errors"
    ]
    for f in figures:
        lines.append(
            f"{f.in_flight:>9}  {f.throughput:>10,.0f}  {f.p50_us / 1000:>8.3f}  "
            f"{f.p99_us / 1000:>8.3f}  {f.calls:>9,}  {f.errors}"
        )
    return "\n".join(lines)


def _loop_name(loop: EventLoop) -> str:
    """The loop ``loop`` resolves to, or what was asked for when that is unavailable
    (``run`` reports that)."""
    try:
        return resolve(loop).value
    except PluginError:
        return loop.value


@app.command("bench")
def bench(
    broker: BrokerOption = None,
    in_flight: Annotated[
        list[int] | None,
        typer.Option("--in-flight", "-n", min=1, help="Calls in flight (repeatable)."),
    ] = None,
    seconds: Annotated[float, typer.Option(min=0.05, help="Seconds per measurement.")] = 5.0,
    payload: Annotated[
        int, typer.Option(min=0, metavar="BYTES", help="Bytes of argument text per call.")
    ] = 16,
    persistent: Annotated[
        bool, typer.Option(help="Use a persistent:// request queue (at least once).")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    loop: LoopOption = EventLoop.AUTO,
) -> None:
    """Measure tool calls on a broker: latency (p50/p99) and throughput per concurrency.

    An echo service and a client run in this process, each on its own connection.
    """
    settings = load_settings(broker)
    levels = sorted(set(in_flight or [1, 16, 64]))
    interactive = sys.stderr.isatty() and not as_json

    def on_level(level: int) -> Callable[[int], None] | None:
        if not as_json:
            typer.echo(f"  measuring {level} in flight for {seconds:g} s", err=True)
        return _progress_line(level, seconds) if interactive else None

    if not as_json:
        typer.echo(
            f"toolbus bench on {redact_url(settings.broker)}, {payload}-byte arguments, "
            f"{_loop_name(loop)} event loop",
            err=True,
        )
    figures, pending = run(
        lambda: bench_broker(
            settings.broker,
            levels,
            seconds,
            payload=payload,
            persistent=persistent,
            options=settings.broker_options,
            on_level=on_level,
        ),
        loop=loop,
    )
    if interactive:
        typer.echo("", err=True)
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "broker": redact_url(settings.broker),
                    "payload_bytes": payload,
                    "persistent": persistent,
                    "event_loop": _loop_name(loop),
                    "figures": [f.as_dict() for f in figures],
                    "pending_after": pending,
                },
                indent=2,
            )
        )
    else:
        typer.echo(table(figures))
    if pending:
        fail(f"{pending} call(s) still pending after the run: waiters leaked", 1)
