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
from tests.support.servers import free_port
from toolbus.domain.errors import ToolbusError

pytestmark = pytest.mark.anyio

#: A connect timeout the fast path must not wait for (it would fail the test's guard).
PATIENT = {"connect_timeout": 60}


@pytest.mark.parametrize("scheme", ["nats", "kafka", "pulsar", "amqp"])
async def test_connect_says_at_once_that_nothing_listens(scheme: str) -> None:
    port = free_port()
    options = {} if scheme == "kafka" else PATIENT

    with anyio.fail_after(30), pytest.raises(ToolbusError) as raised:
        await toolbus.connect(f"{scheme}://127.0.0.1:{port}", options)

    assert f"nothing listens on 127.0.0.1:{port} (connection refused)" in str(raised.value)


async def test_one_server_that_listens_is_enough_to_try(tmp_path: Path) -> None:
    from tests.nats.server import NatsServer

    server = NatsServer(tmp_path)
    with server.running():
        bus = await toolbus.connect(
            f"nats://127.0.0.1:{free_port()},{server.url.removeprefix('nats://')}",
            {"randomize": False},
        )
        await bus.close()


@pytest.mark.parametrize("scheme", ["nats", "kafka", "pulsar", "amqp"])
@pytest.mark.slow
async def test_the_command_line_says_it_in_one_line_and_exits_1(
    scheme: str, tmp_path: Path
) -> None:
    script = Path(sys.executable).with_name("toolbus")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLBUS_")}
    url = f"{scheme}://127.0.0.1:{free_port()}"
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
