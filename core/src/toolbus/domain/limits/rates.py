"""How a rate limit counts: a token bucket or a sliding window, as pure functions on its state.

A limit allows ``calls`` per ``every`` seconds. Its state is a small JSON object
kept in the state store (one per limit and caller) and changed by
compare-and-set; these functions say, for the state read and the time now,
how many of the calls asked for may go, the state to write back, and, when
none may, how long until one could.

* **sliding-window** (the default): at most ``calls`` in any ``every`` seconds,
  estimated the way most rate limiters estimate it: the calls counted in the
  current fixed window plus the previous window's, weighted by how much of it
  the sliding window still covers. Two numbers per caller, whatever the limit.
* **token-bucket**: a bucket of ``calls`` tokens, refilled at ``calls / every``
  per second; a call takes a token. Bursts up to ``calls``, then the refill rate.

A call may take several at once (:func:`take`'s ``want``): a front door that
counts locally takes a share of the limit in one write and spends it without
asking the store again, and gives back what it did not spend (:func:`give_back`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

Algorithm = Literal["sliding-window", "token-bucket"]
ALGORITHMS: tuple[Algorithm, ...] = ("sliding-window", "token-bucket")

#: A counter's state as stored: JSON, small.
State = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Rate:
    """``calls`` per ``every`` seconds, counted by ``algorithm``."""

    calls: int
    every: float
    algorithm: Algorithm = "sliding-window"

    @property
    def keep_for(self) -> float:
        """Seconds a counter's state matters after its last change: then it reads as empty."""
        return 2 * self.every if self.algorithm == "sliding-window" else self.every


@dataclass(frozen=True, slots=True)
class Taken:
    """What :func:`take` decided: ``granted`` calls go; ``state`` is what to write back
    (``None``: nothing changed); ``retry_after``: seconds until one more could go,
    when none was granted (0 otherwise)."""

    granted: int
    state: State | None
    retry_after: float = 0.0


def take(rate: Rate, state: Mapping[str, Any] | None, now: float, want: int = 1) -> Taken:
    """Take up to ``want`` calls from ``state`` (``None``: nothing counted yet) at ``now``."""
    if rate.algorithm == "token-bucket":
        return _take_tokens(rate, state, now, want)
    return _take_window(rate, state, now, want)


def give_back(
    rate: Rate, state: Mapping[str, Any] | None, now: float, count: int, taken_at: float
) -> State | None:
    """``state`` with ``count`` calls taken at ``taken_at`` and not made given back;
    ``None`` when there is nothing to give back to (the state is gone, or the window
    they were taken in no longer counts)."""
    if state is None or count <= 0:
        return None
    if rate.algorithm == "token-bucket":
        tokens, at = _tokens(rate, state, now)
        return {"tokens": min(float(rate.calls), tokens + count), "at": at}
    window, current, previous = _window(rate, state, now)
    taken_in = math.floor(taken_at / rate.every)
    if taken_in == window:
        current = max(0, current - count)
    elif taken_in == window - 1:
        previous = max(0, previous - count)
    else:
        return None
    return {"window": window, "count": current, "previous": previous}


# ------------------------------------------------------------------ token bucket


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return default
    return float(value)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _tokens(rate: Rate, state: Mapping[str, Any] | None, now: float) -> tuple[float, float]:
    """The tokens in the bucket at ``now`` (refilled since the state was written)."""
    full = float(rate.calls)
    if state is None:
        return full, now
    tokens = min(full, max(0.0, _number(state.get("tokens"), full)))
    at = _number(state.get("at"), now)
    # A writer whose clock runs ahead may have stamped the future: no refill until then.
    elapsed = max(0.0, now - at)
    return min(full, tokens + elapsed * rate.calls / rate.every), max(at, now)


def _take_tokens(rate: Rate, state: Mapping[str, Any] | None, now: float, want: int) -> Taken:
    tokens, at = _tokens(rate, state, now)
    granted = min(want, math.floor(tokens + 1e-9))
    if granted <= 0:
        per_second = rate.calls / rate.every
        return Taken(0, None, max(0.0, (1.0 - tokens) / per_second))
    return Taken(granted, {"tokens": tokens - granted, "at": at})


# ------------------------------------------------------------------ sliding window


def _window(rate: Rate, state: Mapping[str, Any] | None, now: float) -> tuple[int, int, int]:
    """(the window ``now`` falls in, calls counted in it, calls counted in the one before)."""
    window = math.floor(now / rate.every)
    if state is None:
        return window, 0, 0
    stored = _int(state.get("window"))
    count = max(0, _int(state.get("count")) or 0)
    previous = max(0, _int(state.get("previous")) or 0)
    if stored is None or stored < window - 1:
        return window, 0, 0
    if stored == window - 1:
        return window, 0, count
    # The current window (or a later one, written by a clock running ahead: counted as now).
    return window, count, previous


def _take_window(rate: Rate, state: Mapping[str, Any] | None, now: float, want: int) -> Taken:
    window, count, previous = _window(rate, state, now)
    elapsed = now - window * rate.every
    weight = max(0.0, 1.0 - elapsed / rate.every)
    used = previous * weight + count
    room = math.floor(rate.calls - used + 1e-9)
    granted = max(0, min(want, room))
    if granted <= 0:
        return Taken(0, None, _window_wait(rate, count, previous, elapsed))
    return Taken(granted, {"window": window, "count": count + granted, "previous": previous})


def _window_wait(rate: Rate, count: int, previous: int, elapsed: float) -> float:
    """Seconds until the estimate leaves room for one call, if nothing else is counted."""
    every, room = rate.every, rate.calls - 1
    if count > room:
        # Not in this window: in the next, this window's calls weigh less as it slides on.
        later = every * (1.0 - room / count) if count else 0.0
        return (every - elapsed) + max(0.0, later)
    if previous <= 0:
        return 0.0
    return max(0.0, every * (1.0 - (room - count) / previous) - elapsed)
