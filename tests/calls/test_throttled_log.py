"""A library's repeated warnings pass once per interval, with a count of the rest."""

from __future__ import annotations

import logging
import uuid

from toolbus._internal.throttled_log import ThrottlingFilter, throttle_loggers


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.getMessage()}")


def a_logger() -> tuple[logging.Logger, Collect]:
    logger = logging.getLogger(f"toolbus.test.filter.{uuid.uuid4().hex}")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    collect = Collect()
    logger.addHandler(collect)
    return logger, collect


def test_repeated_errors_of_a_kind_pass_once_per_interval_with_a_count() -> None:
    now = [0.0]
    logger, collect = a_logger()
    throttle_loggers([logger.name], ThrottlingFilter(interval=60, clock=lambda: now[0]))

    for node in range(50):  # a retry every 100 ms for five seconds
        logger.error("Unable connect to node with id %s: %s", node % 2, "refused")
        now[0] += 0.1
    now[0] = 61.0
    logger.error("Unable connect to node with id %s: %s", 1, "refused")

    assert collect.lines == [
        "ERROR Unable connect to node with id 0: refused",
        "ERROR Unable connect to node with id 1: refused (49 more like this in the last 60 s "
        "suppressed)",
    ]


def test_a_new_kind_of_error_shows_at_once_and_info_is_untouched() -> None:
    logger, collect = a_logger()
    throttle_loggers([logger.name], ThrottlingFilter(interval=60))

    for _ in range(3):
        logger.error("Failed fetch messages from %s", 1)
        logger.info("Discovered coordinator %s", 1)
    logger.warning("Heartbeat failed: member_id was not recognized")

    assert collect.lines == [
        "ERROR Failed fetch messages from 1",
        *["INFO Discovered coordinator 1"] * 3,
        "WARNING Heartbeat failed: member_id was not recognized",
    ]


def test_past_its_table_size_the_filter_lets_everything_through() -> None:
    logger, collect = a_logger()
    throttle_loggers([logger.name], ThrottlingFilter(interval=60, max_kinds=1))

    for _ in range(2):
        logger.error("first kind")
    for _ in range(2):
        logger.error("second kind")

    assert collect.lines == ["ERROR first kind", "ERROR second kind", "ERROR second kind"]


def test_a_filter_is_attached_once() -> None:
    logger, _ = a_logger()
    throttling = ThrottlingFilter()
    throttle_loggers([logger.name, logger.name], throttling)
    throttle_loggers([logger.name], throttling)
    assert logger.filters == [throttling]
