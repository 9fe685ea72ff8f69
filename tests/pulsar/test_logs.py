"""pulsar-client's own log lines reach Python logging, filtered natively by level."""

from __future__ import annotations

import logging
import socket
import threading

import anyio
import pytest

from tests.support.servers import refusing_port
from toolbus_pulsar import BrokerUnreachable, connect
from toolbus_pulsar.logs import CLIENT_LOGGER, parse_line


@pytest.mark.parametrize(
    ("line", "level", "text"),
    [
        (
            "2026-01-02 10:11:12.345 ERROR [1403] ClientConnection:485 | refused\n",
            logging.ERROR,
            "ClientConnection:485 | refused",
        ),
        ("2026-01-02 10:11:12.345 WARN  [7] C:1 | slow", logging.WARNING, "C:1 | slow"),
        ("2026-01-02 10:11:12.345 INFO  [7] X:1 | hi", logging.INFO, "X:1 | hi"),
        ("something else entirely", logging.WARNING, "something else entirely"),
    ],
)
def test_native_lines_are_parsed(line: str, level: int, text: str) -> None:
    assert parse_line(line) == (level, text)


class _Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self.arrived = threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        self.arrived.set()


@pytest.mark.anyio
@pytest.mark.broker
async def test_client_errors_arrive_as_python_log_records() -> None:
    caught = _Caught()
    CLIENT_LOGGER.addHandler(caught)
    try:
        # One broker refuses, the other accepts and never answers: the client tries both.
        with refusing_port() as port, socket.create_server(("127.0.0.1", 0)) as silent:
            refusing = f"127.0.0.1:{port}"
            url = f"pulsar://{refusing},127.0.0.1:{silent.getsockname()[1]}"
            with pytest.raises(BrokerUnreachable):
                await connect(url, {"connect_timeout": 1})
        assert await anyio.to_thread.run_sync(caught.arrived.wait, 10)
    finally:
        CLIENT_LOGGER.removeHandler(caught)
    refused = [r for r in caught.records if refusing.rsplit(":", 1)[1] in r.getMessage()]
    assert refused and refused[0].levelno == logging.ERROR
