"""``toolbus serve`` on Pulsar shuts down at once while the broker is down."""

from __future__ import annotations

import contextlib
from pathlib import Path

import anyio
import pytest

from tests.nats.processes import serve
from tests.pulsar.server import pulsar_lite_server

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

#: Twice what the test waits for the shutdown: a shutdown waiting it out fails the test.
OPERATION_TIMEOUT = 60


async def test_sigterm_with_the_broker_down_does_not_wait_on_it(tmp_path: Path) -> None:
    (tmp_path / "broker").mkdir()
    with contextlib.ExitStack() as broker:
        url = broker.enter_context(pulsar_lite_server(tmp_path / "broker"))
        options = f"?operation_timeout={OPERATION_TIMEOUT}"
        async with serve(["calculator"], url + options, workdir=tmp_path) as served:
            await served.wait_for("announcing calculator")
            broker.close()  # the broker stops
            with anyio.fail_after(30):
                await served.wait_for("Connection refused")
            served.process.terminate()
            with anyio.move_on_after(OPERATION_TIMEOUT / 2):
                await served.process.wait()
            assert served.process.returncode is not None, "\n".join(served.lines)
            await served.wait_for("not withdrawn, the broker cannot be reached")

    assert served.process.returncode == 0, "\n".join(served.lines)
    assert not any("Traceback" in line for line in served.lines), served.lines
