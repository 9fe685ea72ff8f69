"""Answering probes: "say what you have now", sent by agents and commands as they start.

A starting agent publishes one :class:`~toolbus.domain.live.announcements.Probe`
on the probe queue instead of waiting for the next periodic message: announcers
answer with their announcement, the config service's publisher with its
current version. :class:`ProbeAnswers` is how both answer: every probe is
followed by an answer made after it, and probes that arrive within one
cool-down of the last answer share the next one, so a fleet of agents starting
at once costs each answerer one message per cool-down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

import anyio
from anyio.abc import TaskStatus

from toolbus._internal.throttled_log import ThrottledLog
from toolbus.application.calls.supervision import plain_errors
from toolbus.domain.errors import BrokerUnavailable, BusClosed
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Probe
from toolbus.ports import Bus, Subscription

log = logging.getLogger("toolbus.announcements")

#: Seconds between answers made for probes.
PROBE_COOLDOWN = 1.0


class ProbeAnswers:
    """Answers the probes heard on a subscription with ``answer()``, at most once per cool-down.

    The owner calls :meth:`answered` whenever it publishes on its own (a
    periodic announcement counts as an answer to the probes before it).
    """

    def __init__(
        self,
        answer: Callable[[], Awaitable[object]],
        *,
        cooldown: float = PROBE_COOLDOWN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._answer = answer
        self.cooldown = cooldown
        self.clock = clock
        self._last: float | None = None
        self._probed = anyio.Event()

    def answered(self) -> None:
        """Note that the owner has just published what a probe asks for."""
        self._last = self.clock()

    async def run(self, probes: Subscription) -> None:
        """Answer the probes on ``probes`` until cancelled or the subscription ends.

        A subscription that fails ends only the answering: the owner's periodic
        publication goes on, and probes wait for it.
        """
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(self._answer_when_probed)
            try:
                async for delivery in probes:
                    await delivery.ack()
                    try:
                        message = messages.decode(delivery.body)
                    except ValueError:
                        continue
                    if isinstance(message, Probe):
                        self._probed.set()
            except Exception as exc:
                log.warning("stopped hearing probes (the periodic message goes on): %s", exc)
            tasks.cancel_scope.cancel()

    async def _answer_when_probed(self) -> None:
        while True:
            await self._probed.wait()
            if self._last is not None:
                wait = self.cooldown - (self.clock() - self._last)
                if wait > 0:
                    await anyio.sleep(wait)
            self._probed = anyio.Event()
            await self._answer()


async def subscribe_probes(bus: Bus, queue: str, who: str, every: float) -> Subscription | None:
    """A subscription to the probes on ``queue``, or None (logged) when the bus refuses it
    or the broker is away; raises :class:`~toolbus.domain.errors.BusClosed` when the bus
    was closed.

    ``who`` and ``every`` (its period) go into the warning: without probes, what
    it publishes still comes every period.
    """
    try:
        return await bus.subscribe(queue)
    except Exception as exc:
        if isinstance(exc, BusClosed) and not isinstance(exc, BrokerUnavailable):
            raise  # closed for good: the owner stops
        log.warning("%s: cannot hear probes (publishing every %g s only): %s", who, every, exc)
        return None


class PassingFailures:
    """Publications that failed because the broker is away for now: a warning per
    ``interval`` for each publisher, however often it tries (:func:`publish_or_wait`)."""

    def __init__(self, interval: float = 60.0) -> None:
        self._log = ThrottledLog(log, interval=interval)

    def warning(self, what: str, exc: BaseException, retry_in: float) -> None:
        self._log.warning(
            "unavailable",
            "could not %s: %s; trying again every %g s until the broker is back",
            what,
            exc,
            retry_in,
        )


async def publish_or_wait(
    publish: Callable[[], Awaitable[object]],
    *,
    what: str,
    failures: PassingFailures,
    retry_in: float,
) -> bool:
    """``publish()`` once, for work that publishes again by itself (announcements, pushed
    configuration): False when it failed, logged, and the publisher should carry on.

    A broker that is away (:class:`~toolbus.domain.errors.BrokerUnavailable`) is a
    passing failure, warned about once per minute however often this is called;
    any other error is a warning each time. Only a bus closed for good
    (:class:`~toolbus.domain.errors.BusClosed`) is raised: the publisher stops.
    """
    try:
        await publish()
    except BrokerUnavailable as exc:
        failures.warning(what, exc, retry_in)
        return False
    except BusClosed:
        raise
    except Exception as exc:
        log.warning("could not %s: %s", what, exc)
        return False
    return True


async def publish_until_stopped(
    publish: Callable[[], Awaitable[object]],
    answers: ProbeAnswers,
    probes: Subscription | None,
    *,
    every: float,
    stop: anyio.Event,
    task_status: TaskStatus[None],
) -> None:
    """Publish now, then on every probe heard on ``probes`` and every ``every`` seconds,
    until ``stop`` is set; ``task_status`` is signalled after the first publication."""
    await publish()
    task_status.started()
    # A bus closed under a publication ends this as that error, not as a task group's.
    with plain_errors():
        async with anyio.create_task_group() as tasks:
            if probes is not None:
                tasks.start_soon(answers.run, probes)
            while not stop.is_set():
                with anyio.move_on_after(every):
                    await stop.wait()
                if not stop.is_set():
                    await publish()
            tasks.cancel_scope.cancel()
