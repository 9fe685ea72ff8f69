"""While the broker cannot be reached, a call ends at its deadline, whatever it waits for.

The connection is cut (and held down) by a TCP proxy between the client and the
session's pulsar-lite. pulsar-client waits up to ``operation_timeout`` for a
subscription while the broker is away; a call whose response subscription is not
made yet still ends with ``ToolTimeout`` at its own deadline, and the
subscription is made once the broker is back.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import anyio
import pytest
from yarl import URL

from tests.support.tcp_proxy import TcpProxy
from toolbus import ToolServiceClient, ToolTimeout, connect, running, tool_service

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
def proxy(pulsar_url: str) -> Iterator[TcpProxy]:
    port = URL(pulsar_url).port
    assert port is not None
    with TcpProxy(port) as running:
        yield running


async def test_a_call_ends_at_its_deadline_while_its_answers_cannot_be_subscribed_to(
    pulsar_url: str, proxy: TcpProxy
) -> None:
    suffix = uuid.uuid4().hex[:8]

    @tool_service(f"echo-{suffix}")
    async def echo(text: str) -> str:
        return text

    route = {"request_queue": echo.request_queue, "response_queue": echo.response_queue}
    service_bus = await connect(pulsar_url)  # not through the proxy: it keeps serving
    bus = await connect(f"pulsar://127.0.0.1:{proxy.port}?operation_timeout=20")
    try:
        async with running(service_bus, echo), ToolServiceClient(bus) as client:
            proxy.cut()
            # Bounded well below the broker's operation timeout: a hang fails here.
            with anyio.fail_after(10), pytest.raises(ToolTimeout):
                await client.call(**route, arguments={"text": "during"}, timeout=1.0)
            proxy.restore()
            with anyio.fail_after(60):  # the client calls again once the broker is back
                while True:
                    try:
                        answer = await client.call(**route, arguments={"text": "after"}, timeout=2)
                    except ToolTimeout:
                        continue
                    break
            assert answer == "after"
    finally:
        await bus.close()
        await service_bus.close()
