"""``toolbus serve --loop``: a served call answers on uvloop as on the standard loop."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from tests.nats.processes import serve
from tests.nats.server import NatsServer
from toolbus import ToolServiceClient
from toolbus_calculator import calculator_service
from toolbus_nats import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_a_served_call_answers_on_the_chosen_event_loop(
    nats_server: NatsServer, tmp_path: Path, loop: str
) -> None:
    # TOOLBUS_LOOP is what --loop reads when it is not given.
    env = {**os.environ, "TOOLBUS_LOOP": loop}
    async with serve(["calculator"], nats_server.url, workdir=tmp_path, env=env) as served:
        await served.wait_for(f"event loop: {loop}")
        bus = await connect(nats_server.url)
        try:
            async with ToolServiceClient(bus) as client:
                with anyio.fail_after(30):
                    answer = await client.call(
                        request_queue=calculator_service.request_queue,
                        response_queue=calculator_service.response_queue,
                        user="alice",
                        arguments={"expression": "6 * 7"},
                    )
        finally:
            await bus.close()
    assert answer == "42"
