"""``toolbus serve`` on NATS shuts down cleanly while the server is down."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from tests.nats.processes import serve
from tests.nats.server import NatsServer

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


async def test_sigterm_with_the_server_down_exits_0_with_one_line_about_it(
    own_nats_server: NatsServer, tmp_path: Path
) -> None:
    server = own_nats_server
    with server.running() as process:
        async with serve(["calculator"], server.url, workdir=tmp_path) as served:
            await served.wait_for("announcing calculator")
            process.kill()
            process.wait()
            with anyio.fail_after(30):
                await served.wait_for("lost the connection")
            shutdown_from = len(served.lines)
            served.process.terminate()
            with anyio.fail_after(30):
                status = await served.process.wait()
                await served.wait_for("not withdrawn")

            after = served.lines[shutdown_from:]
            assert status == 0, "\n".join(served.lines)
            assert not any("Traceback" in line for line in served.lines), served.lines
            assert [line for line in after if "WARNING" in line or "ERROR" in line] == [
                line for line in after if "not withdrawn, the broker cannot be reached" in line
            ], after
