"""What the bus suite's cases share: how the suite is bound to an adapter (:class:`BoundBus`)
and the helpers its cases (and adapters' own tests) use."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the bus conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.service import ToolService, tool_service
from toolbus.ports import Bus, Delivery, Subscription

BusFactory = Callable[[], Awaitable[Bus]]
FOUR_MB = 4 * 1024 * 1024


def fresh_queue(persistent: bool = False, kind: str = "q") -> str:
    scheme = "persistent" if persistent else "non-persistent"
    return f"{scheme}://conformance/{kind}/{uuid.uuid4().hex[:12]}"


async def next_delivery(subscription: Subscription, timeout: float) -> Delivery:
    with anyio.fail_after(timeout):
        async for delivery in subscription:
            return delivery
    raise AssertionError("the subscription ended before a message arrived")


def echo_service(persistent: bool = False) -> ToolService:
    request_queue = fresh_queue(persistent, "request")
    response_queue = fresh_queue(False, "response")

    @tool_service(
        f"echo-{uuid.uuid4().hex[:8]}",
        request_queue=request_queue,
        response_queue=response_queue,
    )
    async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        return f"{user}:{arguments.get('text', '')}"

    return echo


class BoundBus:
    """The fixtures every case uses: ``bus_factory`` (the binding), ``connect``, ``stack``."""

    settle_timeout: float = 10.0

    @pytest.fixture
    def bus_factory(self) -> BusFactory:
        raise NotImplementedError("bind the suite by overriding the 'bus_factory' fixture")

    @pytest.fixture
    async def stack(self) -> AsyncIterator[AsyncExitStack]:
        async with AsyncExitStack() as stack:
            yield stack

    @pytest.fixture
    def connect(self, bus_factory: BusFactory, stack: AsyncExitStack) -> BusFactory:
        """A new connection, closed when the test ends."""

        async def open_bus() -> Bus:
            bus = await bus_factory()
            stack.push_async_callback(bus.close)
            return bus

        return open_bus

    async def _client(self, bus: Bus, stack: AsyncExitStack) -> ToolServiceClient:
        return await stack.enter_async_context(
            ToolServiceClient(bus, default_timeout=self.settle_timeout * 3)
        )
