"""pulsar-client's own log lines, relayed into Python logging at a cost only for lines kept.

Handed a Python logger, pulsar-client calls into Python for *every* line it
could log, debug lines included, whatever the logger's level: about ten calls
per request/reply, each on a client thread that must take the GIL from the
event loop. That halves throughput. Its native loggers filter by level in C++,
but write to stdout (where a CLI prints its results) or to a file.

So the client gets a native file logger at the configured level whose "file" is
a pipe, and one daemon thread turns each line that comes out of it into a
Python log record on ``toolbus_pulsar.client``. Lines below the level never
leave C++. Where a pipe cannot be named (no ``/dev/fd``), the client falls back
to the Python logger and its cost.
"""

from __future__ import annotations

import logging
import os
import re
import threading

import pulsar

CLIENT_LOGGER = logging.getLogger("toolbus_pulsar.client")

LEVELS = {
    "debug": pulsar.LoggerLevel.Debug,
    "info": pulsar.LoggerLevel.Info,
    "warn": pulsar.LoggerLevel.Warn,
    "error": pulsar.LoggerLevel.Error,
}
_PYTHON_LEVELS = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}

_LINE = re.compile(r"\S+ \S+ (DEBUG|INFO|WARN|ERROR) +\[\d+\] (.*)")

_relay_path: str | None = None
_relay_lock = threading.Lock()


def client_logger(level: str) -> pulsar.FileLogger | logging.Logger:
    """What to give ``pulsar.Client(logger=...)`` for lines at ``level`` and above."""
    path = _relay()
    if path is None:
        return CLIENT_LOGGER
    return pulsar.FileLogger(LEVELS[level], path)


def _relay() -> str | None:
    """The path of the process's relay pipe, made on first use; None where impossible."""
    global _relay_path
    with _relay_lock:
        if _relay_path is None:
            read_end, write_end = os.pipe()
            path = f"/dev/fd/{write_end}"
            if not os.path.exists(path):
                os.close(read_end)
                os.close(write_end)
                return None
            # The write end stays open for the life of the process, so the relay
            # never sees end-of-file and every client can open the same path.
            threading.Thread(
                target=_pump, args=(read_end,), name="toolbus-pulsar-log", daemon=True
            ).start()
            _relay_path = path
        return _relay_path


def _pump(read_end: int) -> None:
    with open(read_end, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            level, message = parse_line(line)
            CLIENT_LOGGER.log(level, "%s", message)


def parse_line(line: str) -> tuple[int, str]:
    """Level and text of a native log line: ``2026-01-01 12:00:00.000 WARN  [tid] Src:1 | text``."""
    text = line.rstrip("\n")
    match = _LINE.match(text)
    if match is None:
        return logging.WARNING, text
    return _PYTHON_LEVELS[match[1]], match[2]
