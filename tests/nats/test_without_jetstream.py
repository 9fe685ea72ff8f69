"""A nats-server without JetStream: persistent queues fail with one clear toolbus error.

The error a caller catches is the adapter's ``JetStreamError`` (a ``ToolbusError``)
saying how to enable JetStream, never an ExceptionGroup from a task group inside.
Following the live configuration needs no persistent queue at all.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

import toolbus
from tests.nats.server import NatsServer
from toolbus import tool_service
from toolbus.application.calls.host import running
from toolbus_nats import JetStreamError, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
def core_only_nats(tmp_path: Path) -> Iterator[str]:
    server = NatsServer(tmp_path, jetstream=False)
    with server.running():
        yield server.url


@tool_service(
    "stock",
    request_queue="persistent://shop/request/stock",
    response_queue="non-persistent://shop/response/stock",
)
async def stock(sku: str) -> int:
    return 1


async def test_live_tools_need_no_jetstream_and_log_nothing_for_its_absence(
    core_only_nats: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The config service's request queue is persistent: looking for the live
    # configuration must not send a request there.
    async with toolbus.open_tools(core_only_nats, live=True) as tools:
        assert "tell-joke" in tools.registry.tools

    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_live_commands_print_no_traceback_without_jetstream(
    core_only_nats: str, tmp_path: Path
) -> None:
    script = Path(sys.executable).with_name("toolbus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    done = await anyio.run_process(
        [str(script), "tools", "--broker", core_only_nats, "--wait", "0.5"],
        cwd=tmp_path,
        env=env,
        check=False,
    )

    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr.decode() == ""


async def test_serving_a_persistent_queue_raises_the_toolbus_error_itself(
    core_only_nats: str,
) -> None:
    bus = await connect(core_only_nats)
    try:
        with pytest.raises(JetStreamError, match="-js"):
            async with running(bus, stock):
                pass
    finally:
        await bus.close()
