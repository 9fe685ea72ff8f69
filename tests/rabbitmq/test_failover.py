"""With several nodes in the URL, a service and a client move to the next when theirs stops.

Two independent nodes stand in for a cluster's: when the first stops, the
connections reconnect to the second, declare their exchanges and queues there
again, and calls are answered again. (In a real cluster the queues would be
there already: durable and quorum queues survive a node.)
"""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import anyio
import pytest

from tests.rabbitmq.server import RabbitMQServer
from tests.support.servers import LOOPBACK
from toolbus import ToolServiceClient, running, tool_service
from toolbus.domain.errors import ToolbusError
from toolbus_rabbitmq import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]


async def test_service_and_client_move_to_the_next_node(tmp_path: Path) -> None:
    first, second = RabbitMQServer(tmp_path / "first"), RabbitMQServer(tmp_path / "second")
    name = uuid.uuid4().hex[:8]

    @tool_service(name)
    async def echo(text: str) -> str:
        return text

    route = {"request_queue": echo.request_queue, "response_queue": echo.response_queue}
    with contextlib.ExitStack() as stack:
        stack.callback(first.close)
        stack.callback(second.close)
        stack.enter_context(second.running())
        first_running = contextlib.ExitStack()
        first_running.enter_context(first.running())
        nodes = f"amqp://{LOOPBACK}:{first.port},{LOOPBACK}:{second.port}?reconnect_interval=0.2"
        service_bus, client_bus = await connect(nodes), await connect(nodes)
        try:
            assert {service_bus.connection.url.port, client_bus.connection.url.port} == {first.port}
            async with running(service_bus, echo), ToolServiceClient(client_bus) as client:
                assert await client.call(**route, arguments={"text": "before"}) == "before"
                first_running.close()  # the first node stops
                with anyio.fail_after(60):
                    while True:  # a call every 0.1 s until one is answered: both moved
                        try:
                            answer = await client.call(
                                **route, arguments={"text": "after"}, timeout=2
                            )
                            break
                        except ToolbusError:
                            # Refused at once while the connection is down; the pace of
                            # trying is the measurement's resolution, not a wait for it.
                            await anyio.sleep(0.1)
                assert answer == "after"
                assert service_bus.connection.url.port == second.port
                assert client_bus.connection.url.port == second.port
        finally:
            await service_bus.close()
            await client_bus.close()
