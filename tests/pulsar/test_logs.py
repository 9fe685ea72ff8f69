"""pulsar-client's own log lines reach Python logging, filtered natively by level."""

from __future__ import annotations

import json
import logging
import subprocess
import sys

import pytest

from tests.support.servers import refusing_port
from toolbus_pulsar.logs import parse_line


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


# pulsar-client keeps the logger of the first client a process makes, whatever later
# clients are given; other tests here make theirs with a console logger. So the client
# whose log is checked is the first of a process of its own.
FIRST_CLIENT = """
import json, logging, socket, sys, threading

import anyio

from toolbus_pulsar import BrokerUnreachable, connect
from toolbus_pulsar.logs import CLIENT_LOGGER

class Caught(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []
        self.arrived = threading.Event()

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage()))
        self.arrived.set()

async def main():
    caught = Caught()
    CLIENT_LOGGER.addHandler(caught)
    # One broker refuses, the other accepts and never answers: the client tries both.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        url = f"pulsar://{sys.argv[1]},127.0.0.1:{silent.getsockname()[1]}"
        try:
            await connect(url, {"connect_timeout": 1})
        except BrokerUnreachable:
            pass
        else:
            sys.exit("the client connected")
    arrived = await anyio.to_thread.run_sync(caught.arrived.wait, 10)
    print(json.dumps({"arrived": arrived, "records": caught.records}))

anyio.run(main)
"""


@pytest.mark.broker
def test_client_errors_arrive_as_python_log_records() -> None:
    with refusing_port() as port:
        refusing = f"127.0.0.1:{port}"
        finished = subprocess.run(
            [sys.executable, "-c", FIRST_CLIENT, refusing],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert finished.returncode == 0, finished.stderr
    *printed, last = finished.stdout.splitlines()
    seen = json.loads(last)
    assert seen["arrived"]
    refused = [(level, text) for level, text in seen["records"] if str(port) in text]
    assert refused and refused[0][0] == logging.ERROR
    # Natively written lines are relayed, not printed where a command prints its results.
    assert printed == []
