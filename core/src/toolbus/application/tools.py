"""Calling configured tools by name: the configuration decides queues and config values."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from toolbus.application.client import ToolServiceClient
from toolbus.domain.config import ToolDescriptor
from toolbus.domain.errors import ToolbusError
from toolbus.domain.registry import Registry


class Tools:
    """``await tools.call("tell-joke", {"topic": "cats"}, user="alice")``.

    Looks the tool up in the registry, sends the tool's config values and the
    given arguments to its service's request queue, and returns the observation.
    """

    def __init__(self, client: ToolServiceClient, registry: Registry) -> None:
        self.client = client
        self.registry = registry

    def _route(self, tool: ToolDescriptor) -> dict[str, Any]:
        if tool.type != "tool-service" or tool.service is None:
            raise ToolbusError(
                f"tool {tool.name!r} has type {tool.type!r}, which is not served over the bus"
            )
        service = self.registry.service_for(tool)
        return {
            "request_queue": service.request_queue,
            "response_queue": service.response_queue,
            "config": tool.config,
            "service": service.id,
        }

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        user: str = "",
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> str:
        """Call the tool ``name`` (its configured or LLM name) and return the observation."""
        route = self._route(self.registry.tool(name))
        return await self.client.call(
            user=user, arguments=arguments, timeout=timeout, properties=properties, **route
        )

    async def stream(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        *,
        user: str = "",
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> AsyncIterator[str]:
        """Call the tool ``name`` and yield its answer's chunks as they arrive."""
        route = self._route(self.registry.tool(name))
        async for chunk in self.client.stream(
            user=user, arguments=arguments, timeout=timeout, properties=properties, **route
        ):
            yield chunk
