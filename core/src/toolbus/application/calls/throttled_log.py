"""Warnings about what arrives on the bus, at most one per kind per interval.

A burst of bad messages (requests with no id, asks for undeclared environment
variables, garbage on the announcements queue) would otherwise write one line
each: thousands of lines that hide everything else. The first of a kind is
logged at once; the rest within ``interval`` seconds are counted, and the next
one logged after that, or :meth:`ThrottledLog.flush`, says how many were
suppressed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Hashable
from typing import Any

DEFAULT_INTERVAL = 60.0


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
        self.interval = interval
        self.clock = clock
        #: kind -> [when last logged, warnings suppressed since]
        self._kinds: dict[Hashable, list[float]] = {}

    def warning(self, kind: Hashable, message: str, *args: Any) -> None:
        now = self.clock()
        state = self._kinds.get(kind)
        if state is not None and now - state[0] < self.interval:
            state[1] += 1
            return
        suppressed = 0 if state is None else int(state[1])
        self._kinds[kind] = [now, 0]
        if suppressed:
            message += f" ({suppressed} more like this in the last {self.interval:g} s suppressed)"
        self.logger.warning(message, *args)

    def flush(self) -> None:
        """Log how many warnings of each kind were suppressed since its last line."""
        for kind, state in self._kinds.items():
            if state[1]:
                self.logger.warning(
                    "%d more warning(s) like the last %s one suppressed",
                    int(state[1]),
                    kind,
                )
                state[1] = 0
