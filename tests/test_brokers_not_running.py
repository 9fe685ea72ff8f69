"""A broker URL where nothing listens is reported at once, in one line, on every broker.

The clients would retry a refused connection until their connect timeout (five
seconds by default) and then say they got no answer; a refusal from every server
is certain already, and says more: nothing runs there.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import anyio
import pytest

import toolbus
from tests.support.servers import refusing_port
from toolbus.domain.errors import ToolbusError
from toolbus.testing.conformance import fresh_queue, next_delivery

pytestmark = pytest.mark.anyio

#: A connect timeout the fast path must not wait for (it would fail the test's guard).
PATIENT = {"connect_timeout": 60}


@pytest.mark.parametrize("scheme", ["nats", "kafka", "pulsar", "amqp"])
async def test_connect_says_at_once_that_nothing_listens(scheme: str) -> None:
    options = {} if scheme == "kafka" else PATIENT

    with refusing_port() as port, anyio.fail_after(30), pytest.raises(ToolbusError) as raised:
        await toolbus.connect(f"{scheme}://127.0.0.1:{port}", options)

    assert f"nothing listens on 127.0.0.1:{port} (connection refused)" in str(raised.value)


async def test_one_server_that_listens_is_enough_to_try(tmp_path: Path) -> None:
    from tests.nats.server import NatsServer

    server = NatsServer(tmp_path)
    with server.running(), refusing_port() as dead:
        # The refusing server first (no randomizing): it is tried, and passed over.
        live = server.url.removeprefix("nats://")
        bus = await toolbus.connect(f"nats://127.0.0.1:{dead},{live}", {"randomize": False})
        try:
            # Connected to the one that listens, and working there.
            assert len(server.connections()) == 1
            queue = fresh_queue()
            subscription = await bus.subscribe(queue)
            await bus.publish(queue, b"reached", {"id": "1"})
            assert (await next_delivery(subscription, 10)).body == b"reached"
        finally:
            await bus.close()


@pytest.mark.parametrize("scheme", ["nats", "kafka", "pulsar", "amqp"])
@pytest.mark.slow
async def test_the_command_line_says_it_in_one_line_and_exits_1(
    scheme: str, tmp_path: Path
) -> None:
    script = Path(sys.executable).with_name("toolbus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    with refusing_port() as port:
        url = f"{scheme}://127.0.0.1:{port}"
        done = await anyio.run_process(
            [str(script), "call", "tell-joke", "-a", "topic=cats", "--broker", url],
            cwd=tmp_path,
            env=env,
            check=False,
        )

    lines = done.stderr.decode().splitlines()
    assert done.returncode == 1
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    assert "nothing listens" in lines[0]
