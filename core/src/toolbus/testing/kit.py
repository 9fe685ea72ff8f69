"""A small harness for unit-testing tool services on the in-memory bus."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import ServiceHost, running
from toolbus.application.calls.service import ToolService
from toolbus.memory import MemoryBus, connect

if TYPE_CHECKING:
    from toolbus.application.calls.tools import Tools
    from toolbus.domain.config.registry import Registry


class ToolTestKit:
    """A private in-memory broker, a client, and services served until the test ends.

    >>> await kit.serve(my_service)
    >>> await kit.call(my_service, {"text": "hi"})
    """

    def __init__(self, bus: MemoryBus, client: ToolServiceClient, stack: AsyncExitStack) -> None:
        self.bus = bus
        self.client = client
        self._stack = stack

    @classmethod
    async def open(cls, stack: AsyncExitStack) -> ToolTestKit:
        bus = await connect(f"memory://test-{uuid.uuid4().hex}")
        stack.push_async_callback(bus.close)
        client = await stack.enter_async_context(ToolServiceClient(bus, default_timeout=10.0))
        return cls(bus, client, stack)

    async def serve(self, *services: ToolService, **host_options: Any) -> list[ServiceHost]:
        """Serve ``services`` until the end of the test; returns their hosts."""
        return await self._stack.enter_async_context(running(self.bus, *services, **host_options))

    async def call(
        self,
        service: ToolService,
        arguments: Mapping[str, Any] | None = None,
        *,
        user: str = "test-user",
        config: Mapping[str, Any] | None = None,
        timeout: float | None = None,
    ) -> str:
        """Call ``service`` directly, as a configured tool would."""
        return await self.client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user=user,
            config=config,
            arguments=arguments,
            timeout=timeout,
            service=service.id,
        )

    def tools(self, registry: Registry) -> Tools:
        """A :class:`Tools` facade over this kit's client for ``registry``."""
        from toolbus.application.calls.tools import Tools

        return Tools(self.client, registry)
