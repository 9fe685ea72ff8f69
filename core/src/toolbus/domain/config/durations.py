"""Durations as configuration writes them: ``"90s"``, ``"5m"``, ``"1.5h"``, ``"1d"``, ``"1w"``.

A plain number is seconds. One number and one unit, no combinations (``"1h30m"``
is ``"90m"``): what a reader of ``toolbus.toml`` takes in at a glance.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Seconds in each unit a duration may be written in.
UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*([smhdw])\s*")
FORMS = 'a number of seconds, or a number with s, m, h, d or w ("90s", "5m", "1h", "1d")'


def parse_duration(value: Any) -> float:
    """Seconds in ``value``; :class:`ValueError` saying what to write instead.

    Durations are positive and finite.
    """
    seconds: float
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a duration; write {FORMS}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        match = _DURATION.fullmatch(value)
        if match is None:
            raise ValueError(f"{value!r} is not a duration; write {FORMS}")
        seconds = float(match.group(1)) * UNITS[match.group(2)]
    else:
        raise ValueError(f"{type(value).__name__} {value!r} is not a duration; write {FORMS}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{value!r} is not a positive duration; write {FORMS}")
    return seconds


def duration_text(seconds: float) -> str:
    """``seconds`` as a person reads it back: ``"5m"``, ``"1h"``, ``"90s"``, ``"1.5s"``."""
    for unit in ("w", "d", "h", "m"):
        size = UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"
