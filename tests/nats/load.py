"""Steady call load through a :class:`ToolServiceClient`, and what became of every call.

A fixed number of calls is kept in flight; each carries a unique ``call``
argument, which the test service writes to its run log, so a test can tell a
call that never ran from one that ran twice. A test marks the moment it breaks
something (:meth:`SteadyLoad.mark`); the figures then say how many calls were
in flight at that moment and how long it took until a call sent after it was
answered.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from toolbus import ToolServiceClient, ToolTimeout
from toolbus.domain.errors import ToolbusError

#: Seconds a worker waits after a refused call before it sends the next one.
REFUSED_BACKOFF = 0.1


@dataclass
class CallOutcomes:
    """What happened to the calls of one load run."""

    label: str
    answered: set[str] = field(default_factory=set)
    #: Publishing failed and the caller was told so (the broker did not confirm it).
    refused: set[str] = field(default_factory=set)
    #: Sent, then no answer within the call's timeout.
    timed_out: set[str] = field(default_factory=set)
    #: Calls in flight when the test broke something (summed over every mark).
    in_flight_at_mark: int = 0
    #: For each mark: seconds until the first answer to a call sent after it.
    recoveries: list[float] = field(default_factory=list)
    #: Why calls were refused (the first message of each kind).
    refusals: set[str] = field(default_factory=set)
    #: The longest time without any answer, in seconds (a stall).
    longest_gap: float = 0.0
    #: Who ran each call (process ids, once per run), from the services' run log.
    runners: dict[str, list[str]] = field(default_factory=dict)

    @property
    def sent(self) -> int:
        return len(self.answered) + len(self.refused) + len(self.timed_out)

    @property
    def never_ran(self) -> set[str]:
        """Accepted calls (not refused) that no replica ever ran: lost."""
        return {call for call in self.answered | self.timed_out if call not in self.runners}

    @property
    def ran_more_than_once(self) -> set[str]:
        return {call for call, runners in self.runners.items() if len(runners) > 1}

    def read_run_logs(self, logs: Iterable[Path]) -> None:
        for log in logs:
            if log.exists():
                # One line per run: the call, then who ran it.
                for line in log.read_text().splitlines():
                    call, _, runner = line.partition(" ")
                    if not call.startswith(f"{self.label}-"):
                        continue  # another load's call
                    self.runners.setdefault(call, []).append(runner)

    def report(self) -> str:
        recovery = ", ".join(f"{seconds:.2f} s" for seconds in self.recoveries) or "n/a"
        return (
            f"{self.label}: sent {self.sent}, answered {len(self.answered)}, "
            f"lost {len(self.never_ran)}, ran twice {len(self.ran_more_than_once)}, "
            f"refused at publish {len(self.refused)}, "
            f"unanswered {len(self.timed_out)} (in flight at the failure: "
            f"{self.in_flight_at_mark}), time to recover {recovery}, "
            f"longest time without an answer {self.longest_gap:.2f} s"
        )


class SteadyLoad:
    """Keeps ``in_flight`` calls going until :meth:`finish`; collects :class:`CallOutcomes`."""

    def __init__(
        self,
        client: ToolServiceClient,
        *,
        label: str,
        request_queue: str,
        response_queue: str,
        in_flight: int,
        timeout: float,
    ) -> None:
        self.client = client
        self.request_queue = request_queue
        self.response_queue = response_queue
        self.in_flight = in_flight
        self.timeout = timeout
        self.outcomes = CallOutcomes(label)
        self._running = 0
        self._sent = 0
        self._stopping = False
        self._marked_at: float | None = None
        self._answers = anyio.Event()
        self._last_answer: float | None = None
        self._finished = anyio.Event()

    def mark(self) -> None:
        """Something breaks now: remember the calls in flight and start the recovery clock."""
        self._marked_at = time.monotonic()
        self.outcomes.in_flight_at_mark += self._running

    async def finish(self) -> None:
        """Stop sending, and return once every call sent has its outcome."""
        self._stopping = True
        await self._finished.wait()

    async def wait_for_answers(self, count: int) -> None:
        """Until ``count`` more calls have been answered."""
        goal = len(self.outcomes.answered) + count
        while len(self.outcomes.answered) < goal:
            await self._answers.wait()

    async def run(self) -> None:
        """Run until stopped, then until every call has its outcome."""
        async with anyio.create_task_group() as workers:
            for _ in range(self.in_flight):
                workers.start_soon(self._worker)
        self._finished.set()

    async def _worker(self) -> None:
        while not self._stopping:
            call = f"{self.outcomes.label}-{self._sent}"
            self._sent += 1
            await self._one(call)

    async def _one(self, call: str) -> None:
        sent_at = time.monotonic()
        self._running += 1
        try:
            await self.client.call(
                request_queue=self.request_queue,
                response_queue=self.response_queue,
                arguments={"call": call},
                timeout=self.timeout,
            )
        except ToolTimeout:
            self.outcomes.timed_out.add(call)
            return
        except ToolbusError as exc:
            self.outcomes.refused.add(call)
            self.outcomes.refusals.add(f"{type(exc).__name__}: {exc}")
            # As a real caller would: back off before the next call, not spin.
            await anyio.sleep(REFUSED_BACKOFF)
            return
        finally:
            self._running -= 1
        self.outcomes.answered.add(call)
        now = time.monotonic()
        if self._last_answer is not None:
            gap = now - self._last_answer
            self.outcomes.longest_gap = max(self.outcomes.longest_gap, gap)
        self._last_answer = now
        marked = self._marked_at
        if marked is not None and sent_at >= marked:
            self.outcomes.recoveries.append(now - marked)
            self._marked_at = None
        self._answers.set()
        self._answers = anyio.Event()
