"""Warnings that repeat, at most one per kind per interval, with a count of the rest.

A burst of bad messages (requests with no id, asks for undeclared environment
variables, garbage on the announcements queue) would otherwise write one line
each: thousands of lines that hide everything else. So would a client library
retrying every 100 ms while its broker is away. The first of a kind is logged
at once; the rest within ``interval`` seconds are counted, and the next one
logged after that, or :meth:`ThrottledLog.flush`, says how many were
suppressed.

:class:`ThrottledLog` is for warnings toolbus writes itself;
:class:`ThrottlingFilter` does the same to the records of another library's
loggers (see :func:`throttle_loggers`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import Any

DEFAULT_INTERVAL = 60.0


class Throttle:
    """Admits one event per ``kind`` per ``interval`` and counts the others.

    ``kind`` must come from a small fixed set (never from message content), so
    that the memory kept stays bounded.
    """

    def __init__(
        self, *, interval: float = DEFAULT_INTERVAL, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.interval = interval
        self.clock = clock
        #: kind -> [when last admitted, events suppressed since]
        self._kinds: dict[Hashable, list[float]] = {}

    def __len__(self) -> int:
        return len(self._kinds)

    def __contains__(self, kind: Hashable) -> bool:
        return kind in self._kinds

    def admit(self, kind: Hashable) -> int | None:
        """None to suppress this event; else how many of its kind were suppressed before it."""
        now = self.clock()
        state = self._kinds.get(kind)
        if state is not None and now - state[0] < self.interval:
            state[1] += 1
            return None
        self._kinds[kind] = [now, 0]
        return 0 if state is None else int(state[1])

    def drain(self) -> Iterator[tuple[Hashable, int]]:
        """Each kind with events suppressed since it was last admitted; resets the counts."""
        for kind, state in self._kinds.items():
            if state[1]:
                yield kind, int(state[1])
                state[1] = 0


def _suppressed_note(count: int, interval: float) -> str:
    return f" ({count} more like this in the last {interval:g} s suppressed)"


class ThrottledLog:
    """Logs a warning per ``kind`` at most once per ``interval``, counting the rest.

    ``kind`` must come from a small fixed set (never from message content), so
    that the memory kept stays bounded.
    """

    def __init__(
        self,
        logger: logging.Logger,
        *,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self._throttle = Throttle(interval=interval, clock=clock)

    @property
    def interval(self) -> float:
        return self._throttle.interval

    def warning(self, kind: Hashable, message: str, *args: Any) -> None:
        suppressed = self._throttle.admit(kind)
        if suppressed is None:
            return
        if suppressed:
            message += _suppressed_note(suppressed, self.interval)
        self.logger.warning(message, *args, stacklevel=2)

    def flush(self) -> None:
        """Log how many warnings of each kind were suppressed since its last line."""
        for kind, count in self._throttle.drain():
            self.logger.warning("%d more warning(s) like the last %s one suppressed", count, kind)


class ThrottlingFilter(logging.Filter):
    """A :class:`logging.Filter` that lets a repeated record through once per interval.

    Records of ``level`` and above are of one kind when they come from the same
    logger with the same message template (``record.msg``, before its arguments
    are filled in), so "cannot connect to node 1" and "... node 2" are one kind.
    The record that is let through after others were held back says how many.
    Records below ``level`` pass untouched. Past ``max_kinds`` kinds, records of
    new kinds pass too: nothing is hidden because the table is full.
    """

    def __init__(
        self,
        *,
        level: int = logging.WARNING,
        interval: float = DEFAULT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
        max_kinds: int = 1000,
    ) -> None:
        super().__init__()
        self.level = level
        self.max_kinds = max_kinds
        self._throttle = Throttle(interval=interval, clock=clock)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < self.level:
            return True
        kind = (record.name, record.levelno, str(record.msg))
        if kind not in self._throttle and len(self._throttle) >= self.max_kinds:
            return True
        suppressed = self._throttle.admit(kind)
        if suppressed is None:
            return False
        if suppressed:
            record.msg = str(record.msg) + _suppressed_note(suppressed, self._throttle.interval)
        return True


def throttle_loggers(names: Iterable[str], throttling: ThrottlingFilter) -> None:
    """Attach ``throttling`` to the loggers ``names`` (once each).

    A filter on a logger sees only the records logged to that very logger, not
    those its children propagate, so every logger that writes gets it.
    """
    for name in names:
        logger = logging.getLogger(name)
        if throttling not in logger.filters:
            logger.addFilter(throttling)
