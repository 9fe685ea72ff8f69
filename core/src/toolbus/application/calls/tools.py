"""Calling configured tools by name: the configuration decides queues and config values."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any

from toolbus.application.calls.client import CallResult, ToolServiceClient, sending_input
from toolbus.application.calls.relaying import InputRound, answered, input_round
from toolbus.application.tracing import conventions
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls import wire
from toolbus.domain.calls.arguments import PLACEHOLDERS, AppliedOptions, apply_options
from toolbus.domain.calls.input_requests import InputReply, InputRequired
from toolbus.domain.calls.trace_context import TraceContext
from toolbus.domain.config.descriptors import (
    AFTER_EXECUTION_VALUES,
    ServiceDescriptor,
    ToolDescriptor,
)
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ToolbusError

log = logging.getLogger("toolbus.tools")

# Every known placeholder renders, as "" when this call has no value for it (a
# call outside an agent session has no request id, tool call id or state).
_NO_VALUES = dict.fromkeys(PLACEHOLDERS, "")


class Tools:
    """``await tools.call("tell-joke", {"topic": "cats"}, user="alice")``.

    Looks the tool up in the registry, applies its argument options, sends its
    config values and the arguments to its service's request queue, and returns
    the observation.

    A tool that asks its caller for input is answered by the relay of the
    enclosing :func:`~toolbus.application.calls.relaying.relaying` block, round
    after round, and raises :class:`~toolbus.domain.calls.input_requests.InputRequired`
    when nobody here answers (see :mod:`toolbus.application.calls.relaying`).

    Every call continues the current trace (see :mod:`toolbus.application.tracing.propagation`)
    or starts one. With an OpenTelemetry SDK configured, each call is an
    ``execute_tool {name}`` span (INTERNAL, GenAI's execute-tool span, see
    :mod:`toolbus.application.tracing.conventions`), parent of the client's span.
    """

    def __init__(self, client: ToolServiceClient, registry: Registry) -> None:
        self.client = client
        #: The live registry; replace it to reconfigure (sessions keep their own).
        self.registry = registry

    def _service(self, tool: ToolDescriptor, registry: Registry) -> ServiceDescriptor:
        if tool.type != "tool-service" or tool.service is None:
            raise ToolbusError(
                f"tool {tool.name!r} has type {tool.type!r}, which is not served over the bus"
            )
        return registry.service_for(tool)

    def _prepare(
        self,
        tool: ToolDescriptor,
        arguments: Mapping[str, Any] | None,
        user: str,
        context: Mapping[str, str] | None,
        trace: TraceContext,
        properties: Mapping[str, str] | None,
    ) -> tuple[AppliedOptions, Mapping[str, str] | None]:
        if not tool.options:
            return AppliedOptions(dict(arguments or {})), properties
        values = {**_NO_VALUES, **(context or {}), "user": user, "trace_id": trace.trace_id}
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
    ) -> CallResult:
        """Call a tool (a name, or a descriptor of ``registry``) and report the details.

        ``context`` fills the ``{request_id}``, ``{tool_call_id}`` and ``{state}``
        placeholders of the tool's argument options (``{user}`` and ``{trace_id}``
        are known here). A ``traceparent`` in ``properties`` is the parent of
        the call; otherwise the current trace is.
        """
        registry = registry or self.registry
        descriptor = registry.tool(tool) if isinstance(tool, str) else tool
        service = self._service(descriptor, registry)

        def describe() -> tuple[str, dict[str, Any]]:
            return conventions.tool_call(
                descriptor.llm_name,
                descriptor.name,
                service.id,
                descriptor.description,
                context.get("tool_call_id") if context else None,
            )

        # With a span recorded, trace is the execute_tool span, current for the block
        # and the parent of the client's; without, the caller's trace (or a new one).
        with tracing.hop("internal", properties, describe) as trace:
            assert trace is not None  # a tool call always has a context to send
            applied, properties = self._prepare(
                descriptor, arguments, user, context, trace, _with_trace(properties, trace)
            )
            asking = input_round()
            if asking is None:
                result = await self.client.invoke(
                    service=service,
                    config=descriptor.config,
                    user=user,
                    arguments=applied.arguments,
                    timeout=timeout,
                    properties=properties,
                )
            else:
                properties = _with_kinds(properties, asking)

                async def once(reply: InputReply | None) -> CallResult:
                    with sending_input(reply):
                        return await self.client.invoke(
                            service=service,
                            config=descriptor.config,
                            user=user,
                            arguments=applied.arguments,
                            timeout=timeout,
                            properties=properties,
                        )

                result = await answered(asking, descriptor.name, once)
        after_execution = result.after_execution
        if after_execution not in AFTER_EXECUTION_VALUES:
            if after_execution is not None:
                # Not from a toolbus service: its other answers may still be good.
                log.warning(
                    "service %r answered with after-execution %r, which is neither 'suspend' "
                    "nor 'terminate'; using tool %r's setting %r",
                    service.id,
                    after_execution[:64],
                    descriptor.name,
                    descriptor.after_execution,
                )
            after_execution = descriptor.after_execution
        return CallResult(result.observation, after_execution, applied, trace.trace_id, result.cost)

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
        invocation = await self.invoke(
            name, arguments, user=user, timeout=timeout, properties=properties
        )
        return invocation.observation

    async def stream(
        self,
        tool: str | ToolDescriptor,
        arguments: Mapping[str, Any] | None = None,
        *,
        user: str = "",
        timeout: float | None = None,
        properties: Mapping[str, str] | None = None,
        context: Mapping[str, str] | None = None,
        registry: Registry | None = None,
    ) -> AsyncIterator[str]:
        """Call a tool (a name, or a descriptor of ``registry``) and yield its answer's chunks.

        ``context`` fills placeholders as for :meth:`invoke`. A stream continues
        the current trace but is not a span of its own: a span held open across
        ``yield`` would leak into the consumer's context.
        """
        registry = registry or self.registry
        descriptor = registry.tool(tool) if isinstance(tool, str) else tool
        service = self._service(descriptor, registry)
        trace = tracing.outgoing(tracing.parent_of(properties))
        applied, properties = self._prepare(
            descriptor, arguments, user, context, trace, _with_trace(properties, trace)
        )
        asking = input_round()
        if asking is None:
            async for chunk in self.client.stream(
                service=service,
                config=descriptor.config,
                user=user,
                arguments=applied.arguments,
                timeout=timeout,
                properties=properties,
            ):
                yield chunk
            return
        properties = _with_kinds(properties, asking)
        # A tool asks before its first chunk: each round is a stream that fails at once.
        reply, rounds = asking.reply, 0
        while True:
            stream = self.client.stream(
                service=service,
                config=descriptor.config,
                user=user,
                arguments=applied.arguments,
                timeout=timeout,
                properties=properties,
            )
            try:
                # The request goes out with the first step; no yield inside the block.
                with sending_input(reply):
                    first = await anext(stream, None)
            except InputRequired as asked:
                reply = await asking.next(asked, rounds, descriptor.name)
                rounds += 1
                continue
            if first is not None:
                yield first
                async for chunk in stream:
                    yield chunk
            return


def _with_kinds(properties: Mapping[str, str] | None, asking: InputRound) -> dict[str, str]:
    """``properties`` saying which kinds of input the caller can give a tool that asks."""
    sent = dict(properties) if properties else {}
    kinds = asking.kinds_property
    if kinds:
        sent[wire.PROP_INPUT_KINDS] = kinds
    return sent


def _with_trace(properties: Mapping[str, str] | None, trace: TraceContext) -> dict[str, str]:
    """``properties`` sending ``trace``: its ``traceparent``, and its ``tracestate`` or none."""
    sent = dict(properties) if properties else {}
    sent[wire.PROP_TRACEPARENT] = trace.traceparent
    if trace.tracestate:
        sent[wire.PROP_TRACESTATE] = trace.tracestate
    else:
        sent.pop(wire.PROP_TRACESTATE, None)
    return sent
