"""The NATS server goes away and comes back: no process restarts, calls work again."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from tests.nats.server import NatsServer
from tests.support.servers import LOOPBACK, refusing_port
from toolbus import ToolServiceClient, ToolTimeout, running, tool_service
from toolbus.domain.calls import wire
from toolbus.domain.errors import BusClosed
from toolbus.testing.conformance import fresh_queue
from toolbus_nats import NatsBus, connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

# Reconnect quickly so that the test does not wait for the production back-off.
FAST = {"reconnect_wait": 0.1, "ack_wait": 1.0}


def echo_on(persistent: bool) -> Any:
    @tool_service(
        f"echo-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(persistent, "request"),
        response_queue=fresh_queue(False, "response"),
    )
    async def echo(text: str) -> str:
        return text

    return echo


async def call(client: ToolServiceClient, service: Any, text: str, timeout: float = 10) -> str:
    return await client.call(
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        arguments={"text": text},
        timeout=timeout,
    )


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as stack:
        yield stack


async def test_calls_work_again_after_the_server_restarts(
    own_nats_server: NatsServer, stack: AsyncExitStack
) -> None:
    server = own_nats_server
    plain, stored = echo_on(persistent=False), echo_on(persistent=True)
    started, release, ended = anyio.Event(), anyio.Event(), anyio.Event()

    @tool_service(
        f"slow-{uuid.uuid4().hex[:8]}",
        request_queue=fresh_queue(kind="request"),
        response_queue=fresh_queue(kind="response"),
    )
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    with server.running() as process:
        service_bus = await connect(server.url, FAST)
        client_bus = await connect(server.url, FAST)
        stack.push_async_callback(client_bus.close)
        stack.push_async_callback(service_bus.close)
        await stack.enter_async_context(running(service_bus, plain, stored, slow))
        client = await stack.enter_async_context(ToolServiceClient(client_bus))
        assert await call(client, plain, "before") == "before"
        assert await call(client, stored, "before") == "before"
        tasks = await stack.enter_async_context(anyio.create_task_group())
        outcome: list[str | Exception] = []

        async def in_flight() -> None:
            try:
                outcome.append(await call(client, slow, "", timeout=2))
            except ToolTimeout as exc:
                outcome.append(exc)
            finally:
                ended.set()

        tasks.start_soon(in_flight)
        with anyio.fail_after(10):
            await started.wait()
        process.kill()  # the server dies while the call is in flight
        process.wait()
        with anyio.fail_after(10):
            await client_bus.wait_disconnected()
            await service_bus.wait_disconnected()
        release.set()  # the answer goes out while there is no server

    with server.running():  # same port, same JetStream directory
        with anyio.fail_after(10):
            await client_bus.wait_connected()
            await service_bus.wait_connected()
        assert await call(client, plain, "after") == "after"
        assert await call(client, stored, "after") == "after"
        with anyio.fail_after(10):
            await ended.wait()
    # Either the buffered answer got through, or the caller learnt why not.
    assert outcome == ["finished"] or isinstance(outcome[0], ToolTimeout), outcome


async def test_a_stored_request_survives_a_restart_while_its_service_is_down(
    own_nats_server: NatsServer, stack: AsyncExitStack
) -> None:
    server = own_nats_server
    stored = echo_on(persistent=True)
    with server.running() as process:
        client_bus: NatsBus = await connect(server.url, FAST)
        stack.push_async_callback(client_bus.close)
        service_bus = await connect(server.url, FAST)
        # The service has run once: its group (durable consumer) exists.
        async with running(service_bus, stored):
            pass
        await service_bus.close()
        request = wire.encode_request("", None, {"text": "kept"})
        await client_bus.publish(stored.request_queue, request, {"id": "kept-1"})
        replies = await client_bus.subscribe(stored.response_queue)
        process.terminate()
        process.wait()
        with anyio.fail_after(10):
            await client_bus.wait_disconnected()

    with server.running():
        with anyio.fail_after(10):
            await client_bus.wait_connected()
        service_bus = await connect(server.url, FAST)
        stack.push_async_callback(service_bus.close)
        await stack.enter_async_context(running(service_bus, stored))
        with anyio.fail_after(10):
            async for reply in replies:
                assert reply.properties["id"] == "kept-1"
                assert b'"response": "kept"' in reply.body
                break


async def test_connecting_to_no_server_fails_clearly() -> None:
    with refusing_port() as port, anyio.fail_after(10), pytest.raises(BusClosed) as caught:
        await connect(f"nats://{LOOPBACK}:{port}", {"connect_timeout": 0.5})
    assert f"{LOOPBACK}:{port}" in str(caught.value)
    assert "nats-server runs there" in str(caught.value)
