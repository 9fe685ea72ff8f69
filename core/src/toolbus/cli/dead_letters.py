"""``toolbus dead-letters``: list (and drop) the requests services moved aside.

A service that verifies callers moves a signed call that waited in its
persistent request queue longer than its maximum queue age to that queue's
dead letters (see docs/security.md). This reads them as the group every
service keeps them for: listed ones stay, unless ``--drop`` removes them.
"""

from __future__ import annotations

import json
import time
from contextlib import AsyncExitStack
from typing import Annotated, Any

import anyio
import typer

from toolbus.application.calls.dead_letters import DEAD_LETTERS_GROUP, DeadLetter
from toolbus.cli._app import app
from toolbus.cli.plugin_api import BrokerOption, VerboseOption, fail, redact_url, run, setup_logging
from toolbus.domain.calls.queues import dead_letter_queue
from toolbus.domain.errors import ConfigError, QueueNameError
from toolbus.plugins import connect
from toolbus.ports import Delivery
from toolbus.settings import load_settings


@app.command("dead-letters")
def dead_letters(
    queue: Annotated[
        str,
        typer.Argument(
            help="The service's request queue (as it serves it); its dead letters are read.",
            show_default=False,
        ),
    ],
    broker: BrokerOption = None,
    drop: Annotated[
        bool, typer.Option("--drop", help="Remove the dead letters listed (they are kept else).")
    ] = False,
    wait: Annotated[
        float,
        typer.Option(min=0.1, help="Seconds without another dead letter that end the listing."),
    ] = 2.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each dead letter as a JSON line.")
    ] = False,
    verbose: VerboseOption = False,
) -> None:
    """List the calls services moved to QUEUE's dead letters instead of serving them."""
    setup_logging(verbose)
    try:
        settings = load_settings(broker)
        source = dead_letter_queue(queue)
    except (ConfigError, QueueNameError) as exc:
        fail(str(exc))

    async def main() -> list[DeadLetter]:
        found: dict[str, tuple[DeadLetter, Delivery]] = {}
        async with AsyncExitStack() as stack:
            bus = await connect(settings.broker, settings.broker_options)
            stack.push_async_callback(bus.close)
            subscription = await bus.subscribe(source, group=DEAD_LETTERS_GROUP)
            stack.push_async_callback(subscription.close)  # unacked ones stay
            deliveries = aiter(subscription)
            while True:
                with anyio.move_on_after(wait):
                    delivery = await anext(deliveries)
                    letter = DeadLetter.of(delivery.properties, delivery.body)
                    # A redelivery of one already held is the same dead letter.
                    found.setdefault(letter.call_id or f"#{len(found)}", (letter, delivery))
                    continue
                break
            if drop:
                for _, delivery in found.values():
                    await delivery.ack()
        return [letter for letter, _ in found.values()]

    letters = run(main)
    now = time.time()
    for letter in letters:
        if as_json:
            typer.echo(json.dumps(_as_json(letter)))
        else:
            typer.echo(_line(letter, now))
    what = "dropped" if drop else "kept; --drop removes them"
    typer.echo(
        f"{len(letters)} dead letter(s) in {source} on {redact_url(settings.broker)} ({what})",
        err=True,
    )


def _line(letter: DeadLetter, now: float) -> str:
    moved = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(letter.moved_at))
        if letter.moved_at is not None
        else "?"
    )
    age = f" sent {now - letter.enqueued_at:.0f} s ago;" if letter.enqueued_at else ""
    return f"{moved} UTC  call {letter.call_id}  user {letter.user or '-'}:{age} {letter.reason}"


def _as_json(letter: DeadLetter) -> dict[str, Any]:
    return {
        "id": letter.call_id,
        "user": letter.user,
        "reason": letter.reason,
        "queue": letter.source,
        "enqueued_at": letter.enqueued_at,
        "moved_at": letter.moved_at,
    }
