"""Calling configured tools by name: the configuration decides queues and config values."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

from toolbus.application import tracing
from toolbus.application.client import ToolServiceClient
from toolbus.domain import wire
from toolbus.domain.arguments import AppliedOptions, apply_options
from toolbus.domain.config import ToolDescriptor
from toolbus.domain.errors import ToolbusError
from toolbus.domain.registry import Registry


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """The outcome of one successful call of a configured tool."""

    observation: str
    #: "suspend" or "terminate": the service's per-response override, else the tool's.
    after_execution: str
    #: Which argument keys the tool's options set (names only, never values).
    applied: AppliedOptions


class Tools:
    """``await tools.call("tell-joke", {"topic": "cats"}, user="alice")``.

    Looks the tool up in the registry, applies its argument options, sends its
    config values and the arguments to its service's request queue, and returns
    the observation.
    """

    def __init__(self, client: ToolServiceClient, registry: Registry) -> None:
        self.client = client
        #: The live registry; replace it to reconfigure (sessions keep their own).
        self.registry = registry

    def _route(self, tool: ToolDescriptor, registry: Registry) -> dict[str, Any]:
        if tool.type != "tool-service" or tool.service is None:
            raise ToolbusError(
                f"tool {tool.name!r} has type {tool.type!r}, which is not served over the bus"
            )
        service = registry.service_for(tool)
        return {
            "request_queue": service.request_queue,
            "response_queue": service.response_queue,
            "config": tool.config,
            "service": service.id,
        }

    def _prepare(
        self,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any] | None,
        user: str,
        context: Mapping[str, str] | None,
        properties: Mapping[str, str] | None,
    ) -> tuple[AppliedOptions, Mapping[str, str] | None]:
        if not tool.options:
            return AppliedOptions(dict(arguments or {})), properties
        trace = tracing.current_trace()
        values = {"user": user, "trace_id": trace.trace_id if trace else ""}
        values.update(context or {})
        applied = apply_options(arguments or {}, tool.options, values)
        if tool.options.envs:
            # Only the variable names travel; the service reads the values from its
            # own environment, so a secret never crosses the bus.
            properties = {**(properties or {}), wire.PROP_ENV_ARGS: json.dumps(tool.options.envs)}
        return applied, properties

    async def invoke(
        self,
        tool: str | ToolDescriptor,
        arguments: Mapping[str, Any] | None = None,
        *,
        user: str = "",
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        registry: Registry | None = None,
    ) -> ToolInvocation:
        """Call a tool (a name, or a descriptor of ``registry``) and report the details.

        ``context`` fills the ``{request_id}``, ``{tool_call_id}`` and ``{state}``
        placeholders of the tool's argument options (``{user}`` and ``{trace_id}``
        are known here).
        """
        registry = registry or self.registry
        descriptor = registry.tool(tool) if isinstance(tool, str) else tool
        applied, properties = self._prepare(descriptor, arguments, user, context, properties)
        result = await self.client.invoke(
            user=user,
            arguments=applied.arguments,
            timeout=timeout,
            properties=properties,
            **self._route(descriptor, registry),
        )
        return ToolInvocation(
            result.text, result.after_execution or descriptor.after_execution, applied
        )

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
        tool = self.registry.tool(name)
        if not tool.options:  # the common case, straight to the client
            return await self.client.call(
                user=user,
                arguments=arguments,
                timeout=timeout,
                properties=properties,
                **self._route(tool, self.registry),
            )
        invocation = await self.invoke(
            tool, arguments, user=user, timeout=timeout, properties=properties
        )
        return invocation.observation

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
        tool = self.registry.tool(name)
        applied, properties = self._prepare(tool, arguments, user, None, properties)
        async for chunk in self.client.stream(
            user=user,
            arguments=applied.arguments,
            timeout=timeout,
            properties=properties,
            **self._route(tool, self.registry),
        ):
            yield chunk
