"""The gateway on NATS: calls and sessions through a real broker, and readiness that
follows the broker going away and coming back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, ExitStack
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.gateway.support import RunningGateway, Signer, authenticator, services, serving, snapshot
from tests.nats.server import NatsServer
from toolbus import running
from toolbus.plugins import connect
from toolbus_gateway import Gateway

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

# Reconnect quickly so that the test does not wait for the production back-off.
FAST = {"reconnect_wait": 0.1}


@pytest.fixture
async def nats_gateway(
    tmp_path: Path, signer: Signer
) -> AsyncIterator[tuple[RunningGateway, NatsServer, ExitStack]]:
    """The gateway and the services on a broker of their own; closing the ExitStack
    stops the broker, and what is entered into it again runs until the end."""
    server = NatsServer(tmp_path)
    tools = services()
    with ExitStack() as broker:
        broker.enter_context(server.running())
        async with AsyncExitStack() as stack:
            service_bus = await connect(server.url, FAST)
            stack.push_async_callback(service_bus.close)
            await stack.enter_async_context(running(service_bus, *tools))
            gateway = Gateway(
                server.url,
                authenticator=authenticator(signer, tmp_path),
                config=snapshot(*tools),
                broker_options=FAST,
            )
            running_gateway = await stack.enter_async_context(serving(gateway))
            yield running_gateway, server, broker


async def test_calls_and_sessions_go_through_nats(
    nats_gateway: tuple[RunningGateway, NatsServer, Any], signer: Signer
) -> None:
    served, _, _ = nats_gateway
    token = signer.token("alice", "ES256")
    async with served.client(token=token) as http:
        echoed = await http.post("/v1/tools/echo/call", json={"arguments": {"text": "via nats"}})
        assert echoed.json()["observation"] == "via nats"
        sid = (await http.post("/v1/sessions", json={})).json()["session_id"]
        moved = await http.post(
            f"/v1/sessions/{sid}/calls",
            json={"name": "add-to-cart", "arguments": {"action": "add", "item": "hat"}},
        )
        assert moved.json()["state"] == "shopping"
        async with http.stream(
            "POST", "/v1/tools/words/stream", json={"arguments": {"text": "x y"}}
        ) as stream:
            body = (await stream.aread()).decode()
        assert "event: chunk" in body and "data: y" in body and "event: end" in body
        assert (await http.delete(f"/v1/sessions/{sid}")).status_code == 200


async def test_readiness_follows_the_broker(
    nats_gateway: tuple[RunningGateway, NatsServer, ExitStack],
) -> None:
    served, server, broker = nats_gateway
    bus: Any = served.gateway.bus
    async with served.client("alice") as http:
        assert (await http.get("/readyz")).status_code == 200

        broker.close()  # the broker stops
        with anyio.fail_after(15):
            await bus.wait_disconnected()
        down = await http.get("/readyz")
        assert down.status_code == 503
        assert down.json()["ready"] is False
        assert down.json()["checks"]["broker"].startswith("disconnected")
        assert (await http.get("/healthz")).status_code == 200  # alive, just not ready

        broker.enter_context(server.running())  # and comes back on the same port
        with anyio.fail_after(15):
            await bus.wait_connected()
        assert (await http.get("/readyz")).status_code == 200
        with anyio.fail_after(20):
            while True:  # the service's subscription comes back on its own schedule
                answer = await http.post(
                    "/v1/tools/echo/call", json={"arguments": {"text": "back"}}
                )
                if answer.status_code == 200:
                    break
                await anyio.sleep(0.1)
        assert answer.json()["observation"] == "back"
