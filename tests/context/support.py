"""What the tool-call context tests share: recording services, snapshots, a bus tap, spans."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from toolbus.application.calls.service import ToolService
from toolbus.application.tracing import propagation as tracing
from toolbus.domain.calls.trace_context import TraceContext
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.ports import Bus


@dataclass
class Received:
    """One request as a recording service saw it."""

    user: str
    config: dict[str, Any]
    arguments: dict[str, Any]
    trace: TraceContext | None


class Recorder(ToolService):
    """A raw ``(user, config, arguments)`` service that keeps what it was called with.

    ``answer(arguments)`` makes the observation (default ``"ok"``).
    """

    def __init__(
        self,
        id: str,
        *,
        request_queue: str = "",
        response_queue: str = "",
        answer: Any = None,
        env_params: tuple[str, ...] = (),
    ) -> None:
        self.id = id
        self.request_queue = request_queue
        self.response_queue = response_queue
        #: The variables of the service's environment tools may have injected.
        self.env_params = env_params
        super().__init__()
        self.calls: list[Received] = []
        self._answer = answer

    @property
    def last(self) -> Received:
        assert self.calls, f"{self.id} was never called"
        return self.calls[-1]

    async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
        self.calls.append(Received(user, config, arguments, tracing.current_trace()))
        if self._answer is None:
            return "ok"
        result = self._answer(arguments)
        if hasattr(result, "__await__"):
            result = await result
        return result


def tool(
    name: str,
    service: str,
    arguments: list[str] | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A tool-service tool descriptor; ``fields`` are extra descriptor keys (``options``...)."""
    return {
        "type": "tool-service",
        "name": name,
        "description": f"the {name} tool",
        "service": service,
        "arguments": [
            {"name": argument, "type": "string", "description": f"the {argument}"}
            for argument in arguments or []
        ],
        **{key.replace("_", "-"): value for key, value in fields.items()},
    }


def registry_for(services: list[ToolService], tools: Mapping[str, dict[str, Any]]) -> Registry:
    return load_registry(
        {
            "tool-service": {service.id: service.descriptor() for service in services},
            "tool": dict(tools),
        }
    )


@dataclass
class Message:
    queue: str
    body: bytes
    properties: dict[str, str]


@dataclass
class BusTap:
    """Every message published on some queues, seen through fan-out subscriptions."""

    messages: list[Message] = field(default_factory=list)

    def on(self, queue: str) -> list[Message]:
        return [m for m in self.messages if m.queue == queue]

    def texts(self) -> Iterator[str]:
        """Every body and property value, raw and JSON-decoded (inner JSON strings too)."""
        for message in self.messages:
            raw = message.body.decode("utf-8", "replace")
            yield raw
            yield from _decoded(raw)
            for name, value in message.properties.items():
                yield name
                yield value


def _decoded(text: str) -> Iterator[str]:
    try:
        value = json.loads(text)
    except ValueError:
        return
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            yield item
            if item[:1] in '{["':
                stack.extend(_decoded(item))


@asynccontextmanager
async def tapped(bus: Bus, *queues: str) -> AsyncIterator[BusTap]:
    """Record every message on ``queues`` while the block runs, and until it is all in."""
    tap = BusTap()
    subscriptions = [await bus.subscribe(queue) for queue in queues]

    async def read(queue: str, subscription: Any) -> None:
        async for delivery in subscription:
            tap.messages.append(Message(queue, bytes(delivery.body), dict(delivery.properties)))
            await delivery.ack()

    async with anyio.create_task_group() as tasks:
        for queue, subscription in zip(queues, subscriptions, strict=True):
            tasks.start_soon(read, queue, subscription)
        try:
            yield tap
        finally:
            # Let the readers take what is already buffered, then stop them.
            await anyio.wait_all_tasks_blocked()
            for subscription in subscriptions:
                await subscription.close()


def formatted(records: list[logging.LogRecord]) -> list[str]:
    """Each log record as a handler would write it, traceback included."""
    formatter = logging.Formatter("%(name)s %(levelname)s %(message)s")
    return [formatter.format(record) for record in records]


def span_texts(spans: Any) -> Iterator[str]:
    """Every name, attribute, event and status text of finished OpenTelemetry spans."""
    for span in spans:
        yield span.name
        yield str(span.status.description or "")
        for key, value in (span.attributes or {}).items():
            yield f"{key}={value}"
        for event in span.events:
            yield event.name
            for key, value in (event.attributes or {}).items():
                yield f"{key}={value}"
