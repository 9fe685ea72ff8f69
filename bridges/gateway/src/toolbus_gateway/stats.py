"""Call rates and latency per tool, for the console (Prometheus has the durable figures)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

#: The window call rates are measured over, in seconds.
RATE_WINDOW = 60.0
# At most this many recent calls are remembered per tool for the rate.
_MAX_RECENT = 10_000


@dataclass(slots=True)
class ToolStats:
    calls: int = 0
    errors: int = 0
    total_seconds: float = 0.0
    max_seconds: float = 0.0
    recent: deque[float] = field(default_factory=lambda: deque(maxlen=_MAX_RECENT))

    @property
    def mean_ms(self) -> float:
        return 1000 * self.total_seconds / self.calls if self.calls else 0.0


@dataclass(frozen=True, slots=True)
class ToolRate:
    """One row of the console's rates table."""

    tool: str
    calls: int
    errors: int
    per_minute: float
    mean_ms: float
    max_ms: float


class CallStats:
    """Counts, errors and latency per tool name, and the rate over the last minute."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._tools: dict[str, ToolStats] = {}

    def record(self, tool: str, seconds: float, ok: bool) -> None:
        stats = self._tools.get(tool)
        if stats is None:
            stats = self._tools[tool] = ToolStats()
        stats.calls += 1
        stats.errors += 0 if ok else 1
        stats.total_seconds += seconds
        stats.max_seconds = max(stats.max_seconds, seconds)
        stats.recent.append(self._clock())

    def rates(self, limit: int = 50) -> list[ToolRate]:
        """The busiest tools first (by calls in the window, then in all)."""
        since = self._clock() - RATE_WINDOW
        rows = []
        for name, stats in self._tools.items():
            while stats.recent and stats.recent[0] < since:
                stats.recent.popleft()
            per_minute = len(stats.recent) * 60.0 / RATE_WINDOW
            rows.append(
                ToolRate(
                    name,
                    stats.calls,
                    stats.errors,
                    per_minute,
                    stats.mean_ms,
                    1000 * stats.max_seconds,
                )
            )
        rows.sort(key=lambda row: (-row.per_minute, -row.calls, row.tool))
        return rows[:limit]
