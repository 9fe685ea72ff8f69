"""aio-pika's and aiormq's own log lines: no repeat of a lost connection, no traceback, and
at most one of a kind a minute.

When the connection goes away, ``toolbus.rabbitmq`` says so in one line (with
the reason). aiormq and aio-pika would say it three times more: an error for the
broker's ``Connection.Close``, a warning with the reader's traceback, and an
error for each channel whose close callback found the connection gone. Those
are dropped. What is left of the clients' warnings and errors is written in
one line each, the exception's text in place of its traceback.

While the broker is away a robust connection tries again every
``reconnect_interval`` (1 s) and logs a WARNING for each try, and one more for
each channel it could not restore: a line a second or more that buries
everything else. Each kind of line (logger and message template) is let
through once a minute, with a count of those held back; lines below WARNING
are not touched, nor is a kind not seen in the last minute, so a new problem
still shows at once.
"""

from __future__ import annotations

import logging

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

#: aiormq's lines about the connection going away, which ``toolbus.rabbitmq`` says itself.
_LOSS_TEMPLATES = (
    "Unexpected connection close from remote",
    "Cancelling cause reader exited abnormally",
    "Server connection %r was stuck",
)


def _restates_a_loss(record: logging.LogRecord) -> bool:
    template = str(record.msg)
    if record.name == "aiormq.connection":
        return template.startswith(_LOSS_TEMPLATES)
    if record.name == "aio_pika.tools" and template.startswith("Callback %r error"):
        # A channel's close callback that found its connection closed (aio-pika
        # opens the channel again once the connection is back).
        args = record.args if isinstance(record.args, tuple) else ()
        return len(args) == 3 and args[1] == "RuntimeError" and str(args[2]).endswith("closed")
    return False


class OneLineClientLogs(logging.Filter):
    """Drops the client libraries' restatements of a lost connection, and writes the rest
    of their warnings and errors without a traceback (see the module docs)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        if _restates_a_loss(record):
            return False
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            args = record.args if isinstance(record.args, tuple) else ()
            # The template stays the record's kind (the throttling counts by it).
            record.msg = f"{record.msg} (%s: %s)"
            record.args = (*args, type(error).__name__, error)
            record.exc_info = None
            record.exc_text = None
        return True


_ONE_LINE = OneLineClientLogs()
_THROTTLING = ThrottlingFilter()


def throttle_client_logs() -> None:
    """One line per client record, throttled (idempotent; process-wide)."""
    # In this order: a record is made one line before it is counted as a kind.
    for name in CLIENT_LOGGERS:
        logger = logging.getLogger(name)
        if _ONE_LINE not in logger.filters:
            logger.addFilter(_ONE_LINE)
    throttle_loggers(CLIENT_LOGGERS, _THROTTLING)
