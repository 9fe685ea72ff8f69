"""aio-pika's and aiormq's own log lines, at most one of a kind a minute.

While the broker is away a robust connection tries again every
``reconnect_interval`` (1 s) and logs a WARNING for each try, and one more for
each channel it could not restore: a line a second or more that buries
everything else. Each kind of line (logger and message template) is let
through once a minute, with a count of those held back; lines below WARNING
are not touched, nor is a kind not seen in the last minute, so a new problem
still shows at once.
"""

from __future__ import annotations

from toolbus._internal.throttled_log import ThrottlingFilter, throttle_loggers

#: Every aio-pika and aiormq logger that writes warnings or errors.
CLIENT_LOGGERS = (
    "aio_pika",
    "aio_pika.channel",
    "aio_pika.message",
    "aio_pika.queue",
    "aio_pika.robust_connection",
    "aio_pika.robust_queue",
    "aio_pika.tools",
    "aiormq.channel",
    "aiormq.connection",
)

_THROTTLING = ThrottlingFilter()


def throttle_client_logs() -> None:
    """Throttle aio-pika's repeated warnings and errors (idempotent; process-wide)."""
    throttle_loggers(CLIENT_LOGGERS, _THROTTLING)
