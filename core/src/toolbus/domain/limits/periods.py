"""The periods a budget is counted in: fixed windows of a duration, or calendar months (UTC).

A budget's spending starts again at each period's start: with ``every = "1d"``
at midnight UTC, with ``"1h"`` on the hour, with ``"month"`` on the first of
the month. Windows of a duration are aligned to the Unix epoch, so every
replica, whatever its time zone, agrees on where one ends.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime

from toolbus.domain.config.durations import FORMS, duration_text, parse_duration

#: The one calendar period a budget may be given by name.
MONTH = "month"


@dataclass(frozen=True, slots=True)
class Period:
    """Windows of ``seconds`` (aligned to the epoch), or calendar months when ``seconds`` is
    ``None``."""

    seconds: float | None

    @classmethod
    def parse(cls, value: object) -> Period:
        """``"month"`` or a duration (:func:`~toolbus.domain.config.durations.parse_duration`);
        :class:`ValueError` saying what to write."""
        if value == MONTH:
            return cls(None)
        try:
            return cls(parse_duration(value))
        except ValueError:
            raise ValueError(
                f'{value!r} is not a budget period; write {FORMS}, or "month"'
            ) from None

    def window(self, now: float) -> tuple[int, float]:
        """(the window ``now`` falls in, seconds until it ends)."""
        if self.seconds is not None:
            window = math.floor(now / self.seconds)
            return window, (window + 1) * self.seconds - now
        moment = datetime.fromtimestamp(now, UTC)
        window = moment.year * 12 + moment.month - 1
        year, month = divmod(window + 1, 12)
        ends = datetime(year, month + 1, 1, tzinfo=UTC).timestamp()
        return window, ends - now

    def __str__(self) -> str:
        return MONTH if self.seconds is None else duration_text(self.seconds)
