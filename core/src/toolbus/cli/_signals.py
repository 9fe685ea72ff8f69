"""Stopping a long-running command on SIGTERM or SIGINT (Ctrl-C), the same way in every one.

Every command that runs until stopped (``serve`` and its kinds, ``agent serve``,
``mcp serve``, ``gateway``) catches both signals from before it says it is
ready (a supervisor may signal as soon as it reads that) until it has stopped,
says on stderr which signal it got and what it does next, finishes what it
was doing, and exits 0. Neither signal is left to its default, which would
end the process by the signal (exit 130 or 143) and skip the drain::

    with stop_signals() as stop:
        ...                                   # start, then print the ready lines
        await stop.wait("draining calls in flight")
        ...                                   # drain and close

Plugins reach it through :mod:`toolbus.cli.plugin_api`.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio
import typer

#: The signals that stop a long-running command.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """The stop signals caught for a command; :meth:`wait` returns at the first."""

    def __init__(self, received: AsyncIterator[signal.Signals]) -> None:
        self._received = received
        #: The signal that stopped the command, once one has.
        self.received: signal.Signals | None = None

    async def wait(self, then: str) -> signal.Signals:
        """Wait for SIGTERM or SIGINT; say ``SIGTERM: {then}`` on stderr and return it."""
        async for received in self._received:
            self.received = signal.Signals(received)
            typer.echo(f"{self.received.name}: {then}", err=True)
            return self.received
        raise RuntimeError("the signal receiver ended")  # it never does while open


@contextmanager
def stop_signals() -> Iterator[StopSignals]:
    """Catch SIGTERM and SIGINT for the block: they stop the command instead of killing it."""
    with anyio.open_signal_receiver(*STOP_SIGNALS) as received:
        yield StopSignals(received)
