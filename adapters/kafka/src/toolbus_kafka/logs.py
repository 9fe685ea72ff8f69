"""aiokafka's own log lines, at most one of a kind a minute.

While the brokers are away aiokafka retries every ``retry_backoff_ms`` (100 ms)
and logs an ERROR for each try and each partition: dozens of lines a second
that bury everything else. Each kind of line (logger and message template) is
let through once a minute, with a count of those held back; lines below
WARNING are not touched, nor is a kind of error that was not seen in the last
minute, so a new problem still shows at once.
"""

from __future__ import annotations

from toolbus._internal.throttled_log import ThrottlingFilter, throttle_loggers

#: Every aiokafka logger that writes warnings or errors.
CLIENT_LOGGERS = (
    "aiokafka",
    "aiokafka.admin.client",
    "aiokafka.cluster",
    "aiokafka.conn",
    "aiokafka.consumer.consumer",
    "aiokafka.consumer.fetcher",
    "aiokafka.consumer.group_coordinator",
    "aiokafka.consumer.subscription_state",
    "aiokafka.producer.producer",
    "aiokafka.producer.sender",
)

_THROTTLING = ThrottlingFilter()


def throttle_client_logs() -> None:
    """Throttle aiokafka's repeated warnings and errors (idempotent; process-wide)."""
    throttle_loggers(CLIENT_LOGGERS, _THROTTLING)
