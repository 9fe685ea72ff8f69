"""Client behaviour: shared response subscriptions, timeouts, cancellation, no leaks."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from toolbus import ToolServiceClient, ToolServiceError, ToolTimeout, running, tool_service
from toolbus.domain.calls import wire
from toolbus.domain.config.descriptors import ServiceDescriptor
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://client-{uuid.uuid4().hex}")
    yield bus
    await bus.close()


@tool_service("slow")
async def slow(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


@tool_service("echo")
async def echo(text: str) -> str:
    return text


async def test_one_response_subscription_per_queue_however_many_calls(bus: MemoryBus) -> None:
    async with running(bus, echo), ToolServiceClient(bus) as client:
        route = {"request_queue": echo.request_queue, "response_queue": echo.response_queue}
        async with anyio.create_task_group() as tasks:
            for i in range(20):
                tasks.start_soon(lambda i=i: client.call(**route, arguments={"text": str(i)}))
        topic = bus.broker.topics[echo.response_queue]
        assert len(topic.fanout) == 1


class PullOnly:
    """The memory bus without listen(): what a bus that cannot push looks like."""

    def __init__(self, bus: MemoryBus) -> None:
        self.bus = bus
        self.max_message_size = bus.max_message_size
        self.publish = bus.publish
        self.subscribe = bus.subscribe
        self.close = bus.close


async def test_a_pushing_bus_delivers_answers_with_no_reader_task(bus: MemoryBus) -> None:
    async with running(bus, echo), ToolServiceClient(bus) as client:
        route = {"request_queue": echo.request_queue, "response_queue": echo.response_queue}
        before = len(asyncio.all_tasks())
        assert await client.call(**route, arguments={"text": "pushed"}) == "pushed"
        assert len(asyncio.all_tasks()) == before
        assert len(bus.listeners) == 1
        assert not any(
            sub.topic is bus.broker.topics[echo.response_queue] for sub in bus.subscriptions
        )


async def test_a_bus_that_cannot_push_is_read_by_a_task_of_the_client(bus: MemoryBus) -> None:
    pulled: Any = PullOnly(bus)
    async with running(bus, echo), ToolServiceClient(pulled) as client:
        route = {"request_queue": echo.request_queue, "response_queue": echo.response_queue}
        before = len(asyncio.all_tasks())
        assert await client.call(**route, arguments={"text": "pulled"}) == "pulled"
        assert len(asyncio.all_tasks()) == before + 1
        assert not bus.listeners
        assert client.pending == 0


async def test_cancelled_calls_leave_no_waiters(bus: MemoryBus) -> None:
    async with running(bus, slow, drain_timeout=0), ToolServiceClient(bus) as client:
        route = {"request_queue": slow.request_queue, "response_queue": slow.response_queue}
        async with anyio.create_task_group() as tasks:
            for _ in range(10):
                tasks.start_soon(lambda: client.call(**route))
            await anyio.wait_all_tasks_blocked()
            assert client.pending == 10
            tasks.cancel_scope.cancel()
        assert client.pending == 0


async def test_timeout_names_the_service_and_the_limit(bus: MemoryBus) -> None:
    async with running(bus, slow, drain_timeout=0), ToolServiceClient(bus) as client:
        with pytest.raises(ToolTimeout) as caught:
            await client.call(
                request_queue=slow.request_queue,
                response_queue=slow.response_queue,
                timeout=0.05,
                service="slow",
            )
        assert caught.value.service == "slow" and caught.value.seconds == 0.05
        assert client.pending == 0


async def test_the_deadline_also_bounds_a_publish_held_up_by_backpressure() -> None:
    bus = await connect(f"memory://client-{uuid.uuid4().hex}?buffer_size=1")
    await bus.subscribe("non-persistent://t/n/stuck", group="nobody-reads")
    await bus.publish("non-persistent://t/n/stuck", b"fills the buffer")
    async with ToolServiceClient(bus) as client:
        with pytest.raises(ToolTimeout):
            await client.call(
                request_queue="non-persistent://t/n/stuck",
                response_queue="non-persistent://t/n/replies",
                timeout=0.05,
            )
        assert client.pending == 0
    await bus.close()


async def test_an_outer_cancellation_is_not_mistaken_for_a_timeout(bus: MemoryBus) -> None:
    async with running(bus, slow, drain_timeout=0), ToolServiceClient(bus) as client:
        with anyio.move_on_after(0.05) as scope:
            await client.call(
                request_queue=slow.request_queue, response_queue=slow.response_queue, timeout=30
            )
        assert scope.cancelled_caught
        assert client.pending == 0


async def test_stream_yields_chunks_then_raises_a_later_error(bus: MemoryBus) -> None:
    @tool_service("half-stream")
    async def half(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        yield "one"
        yield "two"
        raise RuntimeError("broke mid-stream")

    async with running(bus, half), ToolServiceClient(bus) as client:
        chunks: list[str] = []
        with pytest.raises(ToolServiceError, match="internal error in tool service 'half-stream'"):
            async for chunk in client.stream(
                request_queue=half.request_queue, response_queue=half.response_queue
            ):
                chunks.append(chunk)
        assert chunks == ["one", "two"]
        assert client.pending == 0


async def test_answers_for_other_callers_are_ignored(bus: MemoryBus) -> None:
    async with running(bus, echo), ToolServiceClient(bus) as client:
        await bus.publish(echo.response_queue, wire.encode_response("stray"), {"id": "not-mine"})
        answer = await client.call(
            request_queue=echo.request_queue,
            response_queue=echo.response_queue,
            arguments={"text": "mine"},
        )
        assert answer == "mine"


async def test_calls_carry_a_uuid_shaped_id_and_a_deadline(bus: MemoryBus) -> None:
    requests = await bus.subscribe("non-persistent://t/n/peek")
    async with ToolServiceClient(bus, clock=lambda: 1000.0) as client:
        with pytest.raises(ToolTimeout):
            await client.call(
                request_queue="non-persistent://t/n/peek",
                response_queue="non-persistent://t/n/peek-replies",
                timeout=0.01,
            )
    delivery = await anext(aiter(requests))
    assert uuid.UUID(delivery.properties[wire.PROP_ID])
    assert float(delivery.properties[wire.PROP_DEADLINE]) == pytest.approx(1000.01)


async def test_using_the_client_outside_async_with_says_how(bus: MemoryBus) -> None:
    client = ToolServiceClient(bus)
    with pytest.raises(RuntimeError, match="async with"):
        await client.call(request_queue="q", response_queue="r")


async def test_a_service_descriptor_says_where_to_call_and_names_the_service(
    bus: MemoryBus,
) -> None:
    descriptor = ServiceDescriptor("echo", echo.request_queue, echo.response_queue)
    async with running(bus, echo), ToolServiceClient(bus) as client:
        assert await client.call(service=descriptor, arguments={"text": "by descriptor"}) == (
            "by descriptor"
        )
        result = await client.invoke(service=descriptor, arguments={"text": "details"})
        assert result.observation == "details"
        chunks = [c async for c in client.stream(service=descriptor, arguments={"text": "s"})]
        assert chunks == ["s"]

    silent = ServiceDescriptor("nobody-home", slow.request_queue, slow.response_queue)
    async with ToolServiceClient(bus) as client:
        with pytest.raises(ToolTimeout, match="'nobody-home'"):
            await client.call(service=silent, timeout=0.05)


async def test_a_call_without_a_service_or_queues_says_what_to_pass(bus: MemoryBus) -> None:
    async with ToolServiceClient(bus) as client:
        with pytest.raises(TypeError, match="service=<its ServiceDescriptor>, or request_queue="):
            await client.call(request_queue=echo.request_queue, arguments={"text": "x"})
