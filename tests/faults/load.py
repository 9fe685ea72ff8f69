"""Calls made through a fault, and what became of each: the fault matrix's measurements.

:class:`CallLoad` sends a call every ``interval`` seconds to each of the two
echo services (:mod:`tests.faults.tools`), one on a persistent and one on a
non-persistent request queue, through a real
:class:`~toolbus.ToolServiceClient`, and records each call: when it was sent,
when it ended and how (answered, or the error it raised). The client's bus is
wrapped by :class:`PublishLog`, which notes each request the broker took
(``publish`` returned), so that a call that timed out is known to have been
sent or not. From the records and the services' run log, :func:`figures` makes
the matrix's figures: how long calls took to flow again after the fault ended,
how many failed, and on the persistent queue how many were lost or ran twice.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import orjson

from tests.faults.tools import NON_PERSISTENT, PERSISTENT
from toolbus import BrokerUnavailable, ToolServiceClient, ToolTimeout
from toolbus.ports import Bus

#: The two services the load calls, by the kind of their request queue.
SERVICES = {
    "persistent": ("faults-echo", PERSISTENT, "non-persistent://faults/response/echo"),
    "non-persistent": (
        "faults-echo-np",
        NON_PERSISTENT,
        "non-persistent://faults/response/echo-np",
    ),
}
#: Each call's deadline: a persistent request may wait out a broker restart in its
#: queue and still run; a non-persistent one is answered promptly or never.
TIMEOUTS = {"persistent": 15.0, "non-persistent": 5.0}
#: Calls answered in a row (in the order sent) that count as flowing again.
IN_A_ROW = 5
#: How late past its deadline a call may end before it counts as hanging.
DEADLINE_GRACE = 1.0


class PublishLog:
    """A bus that notes which requests the broker took: ``n`` of each published request.

    Everything else goes to the wrapped bus as is; it is the real bus that works.
    """

    def __init__(self, bus: Bus) -> None:
        self._bus = bus
        #: (request queue, n) of every request whose publish returned.
        self.taken: set[tuple[str, int]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._bus, name)

    @property
    def max_message_size(self) -> int | None:
        return self._bus.max_message_size

    async def publish(
        self, queue: str, body: bytes, properties: Mapping[str, str] | None = None
    ) -> None:
        await self._bus.publish(queue, body, properties)
        if queue in (PERSISTENT, NON_PERSISTENT):
            arguments = orjson.loads(orjson.loads(body)["arguments"])
            self.taken.add((queue, int(arguments["n"])))

    async def subscribe(self, queue: str, group: str | None = None) -> Any:
        return await self._bus.subscribe(queue, group)

    async def close(self) -> None:
        await self._bus.close()


@dataclass
class Call:
    """One call of the load."""

    n: int
    kind: str
    sent: float
    ended: float | None = None
    #: "answered", or the name of the error the call raised.
    outcome: str = ""
    message: str = ""
    #: A failure callers are told to expect: a timeout, or the broker away for now.
    documented: bool = True

    @property
    def answered(self) -> bool:
        return self.outcome == "answered"


@dataclass
class CallLoad:
    """Calls to both echo services at a steady pace, recorded; see the module docs."""

    client: ToolServiceClient
    #: The first call's ``n``: loads on one deployment take numbers of their own.
    first: int = 1
    interval: float = 0.05
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._next = self.first

    @property
    def numbers(self) -> range:
        """The ``n`` of every call this load has sent."""
        return range(self.first, self._next)

    async def _call(self, kind: str) -> None:
        _, request_queue, response_queue = SERVICES[kind]
        call = Call(self._next, kind, time.monotonic())
        self._next += 1
        self.calls.append(call)
        try:
            answer = await self.client.call(
                request_queue=request_queue,
                response_queue=response_queue,
                arguments={"n": call.n},
                timeout=TIMEOUTS[kind],
            )
        except Exception as exc:
            call.outcome, call.message = type(exc).__name__, str(exc)[:300]
            call.documented = isinstance(exc, ToolTimeout | BrokerUnavailable)
        else:
            assert answer == str(call.n), (answer, call.n)
            call.outcome = "answered"
        call.ended = time.monotonic()

    async def run(self, until: anyio.Event) -> None:
        """Send calls until ``until`` is set, then wait for the last of them to end."""
        async with anyio.create_task_group() as calls:
            while not until.is_set():
                for kind in SERVICES:
                    calls.start_soon(self._call, kind)
                # The pace of the load is what the figures are measured against.
                with anyio.move_on_after(self.interval):
                    await until.wait()

    def flowing_since(self, kind: str, after: float) -> float | None:
        """When the first of :data:`IN_A_ROW` calls of ``kind`` sent after ``after`` and
        answered in a row was answered; None while there is no such run."""
        run = 0
        sent = [c for c in self.calls if c.kind == kind and c.sent >= after]
        for index, call in enumerate(sent):
            if call.ended is None:
                return None  # the calls before a run must be settled too
            run = run + 1 if call.answered else 0
            if run == IN_A_ROW:
                first = sent[index - IN_A_ROW + 1]
                assert first.ended is not None
                return first.ended
        return None

    async def until_flowing(self, after: float, limit: float) -> None:
        """Return once calls of both kinds flow again (:meth:`flowing_since`)."""
        with anyio.fail_after(limit):
            while True:
                if all(self.flowing_since(kind, after) is not None for kind in SERVICES):
                    return
                # The load's own pace: a look per call sent.
                await anyio.sleep(self.interval)


def read_runs(path: Path) -> Counter[tuple[str, int]]:
    """How often each (service, n) ran, from the services' run log."""
    runs: Counter[tuple[str, int]] = Counter()
    if path.exists():
        for line in path.read_text(encoding="utf-8").splitlines():
            service, n = line.split()
            runs[service, int(n)] += 1
    return runs


async def settled_runs(
    path: Path, load: CallLoad, taken: set[tuple[str, int]], limit: float
) -> Counter[tuple[str, int]]:
    """The run log once every persistent request the broker took has run, or after
    ``limit`` seconds (a request that never runs was lost)."""
    service = SERVICES["persistent"][0]
    wanted = {n for queue, n in taken if queue == PERSISTENT and n in load.numbers}
    with anyio.move_on_after(limit):
        while True:
            runs = read_runs(path)
            if all(runs[service, n] for n in wanted):
                break
            # The services write their runs to a file: polling it is how we hear.
            await anyio.sleep(0.1)
    return read_runs(path)


@dataclass(frozen=True)
class Figures:
    """What one fault did to one broker's calls."""

    broker: str
    fault: str
    #: Seconds from the fault's end until calls flowed again, per queue kind.
    recovered: dict[str, float]
    #: Calls that got no answer, per queue kind (of ``sent`` calls from the fault's
    #: start until they flowed again).
    failed: dict[str, int]
    sent: dict[str, int]
    #: Errors the failed calls raised, by name.
    errors: dict[str, int]
    #: Persistent requests the broker took that never ran.
    lost: int
    #: Calls that ran more than once, per queue kind (the list: which, by service and n).
    duplicated: dict[str, int]
    run_twice: list[tuple[str, int]]
    #: Calls that ended more than :data:`DEADLINE_GRACE` after their deadline.
    hung: int
    #: The slowest answer during the fault (seconds).
    slowest: float

    def row(self) -> str:
        def pair(values: Mapping[str, Any], fmt: str) -> str:
            return " / ".join(format(values[kind], fmt) for kind in SERVICES)

        return (
            f"| {self.broker} | {self.fault} | {pair(self.recovered, '.2f')} s | "
            f"{pair(self.failed, 'd')} of {pair(self.sent, 'd')} | {self.lost} | "
            f"{pair(self.duplicated, 'd')} | {self.slowest:.2f} s |"
        )


HEADER = (
    "| broker | fault | calls flow again after (persistent / non-persistent) | "
    "calls failed | lost | run twice | slowest answer |\n|---|---|---|---|---|---|---|"
)


def figures(
    broker: str,
    fault: str,
    load: CallLoad,
    runs: Counter[tuple[str, int]],
    taken: set[tuple[str, int]],
    started: float,
    ended: float,
) -> Figures:
    """The figures of a fault that began at ``started`` and ended at ``ended``."""
    recovered: dict[str, float] = {}
    failed: dict[str, int] = {}
    sent: dict[str, int] = {}
    errors: Counter[str] = Counter()
    slowest = 0.0
    for kind in SERVICES:
        flowing = load.flowing_since(kind, ended)
        recovered[kind] = math.nan if flowing is None else max(0.0, flowing - ended)
        window = [
            c for c in load.calls if c.kind == kind and started <= c.sent <= (flowing or math.inf)
        ]
        sent[kind] = len(window)
        failed[kind] = sum(not c.answered for c in window)
        errors.update(c.outcome for c in window if not c.answered)
        slowest = max(
            [slowest, *((c.ended - c.sent) for c in window if c.answered and c.ended is not None)]
        )
    service = SERVICES["persistent"][0]
    ours = load.numbers
    lost = sum(
        1 for queue, n in taken if queue == PERSISTENT and n in ours and not runs[service, n]
    )
    run_twice = sorted(key for key, count in runs.items() if count > 1 and key[1] in ours)
    duplicated = {
        kind: sum(1 for name, _ in run_twice if name == service_id)
        for kind, (service_id, _, _) in SERVICES.items()
    }
    hung = sum(
        1
        for c in load.calls
        if c.ended is not None and c.ended - c.sent > TIMEOUTS[c.kind] + DEADLINE_GRACE
    )
    return Figures(
        broker,
        fault,
        recovered,
        failed,
        sent,
        dict(errors),
        lost,
        duplicated,
        run_twice,
        hung,
        slowest,
    )
