"""Idempotency on at-least-once queues: a redelivered request's tool runs once."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest

from toolbus.application.calls.host import running
from toolbus.application.calls.service import ToolService
from toolbus.domain.calls import wire
from toolbus.domain.errors import NotFound
from toolbus.memory.bus import MemoryBus
from toolbus.ports import Delivery, Subscription
from toolbus.testing.kit import ToolTestKit

from .support import Recorder, tapped

pytestmark = pytest.mark.anyio

PERSISTENT = "persistent://acme/tools/counter-requests"
NON_PERSISTENT = "non-persistent://acme/tools/counter-requests"


def counter(request_queue: str = PERSISTENT, answer: Any = None) -> Recorder:
    return Recorder(
        "counter-service",
        request_queue=request_queue,
        response_queue="non-persistent://acme/tools/counter-responses",
        answer=answer,
    )


async def publish(bus: Any, service: ToolService, call_id: str, text: str = "hi") -> None:
    await bus.publish(
        service.request_queue,
        wire.encode_request("u", {}, {"text": text}),
        {wire.PROP_ID: call_id},
    )


async def settle() -> None:
    """Wait until every request published so far has been handled."""
    await anyio.wait_all_tasks_blocked()


def answers_for(tap: Any, call_id: str) -> list[tuple[bytes, dict[str, str]]]:
    return [(m.body, m.properties) for m in tap.messages if m.properties[wire.PROP_ID] == call_id]


async def test_the_same_id_twice_runs_the_tool_once(toolbus: ToolTestKit) -> None:
    service = counter()
    await toolbus.serve(service)
    async with tapped(toolbus.bus, service.response_queue) as tap:
        await publish(toolbus.bus, service, "call-1")
        await settle()
        await publish(toolbus.bus, service, "call-1")
        await settle()
    assert len(service.calls) == 1
    first, second = answers_for(tap, "call-1")
    assert first == second  # the recorded answer, byte for byte


async def test_a_duplicate_of_a_call_still_running_is_dropped(toolbus: ToolTestKit) -> None:
    release = anyio.Event()

    async def slow(arguments: dict[str, Any]) -> str:
        await release.wait()
        return "done"

    service = counter(answer=slow)
    await toolbus.serve(service)
    async with tapped(toolbus.bus, service.response_queue) as tap:
        await publish(toolbus.bus, service, "call-1")
        await settle()
        await publish(toolbus.bus, service, "call-1")
        await settle()
        release.set()
        await settle()
    assert len(service.calls) == 1
    assert len(answers_for(tap, "call-1")) == 1


class _AckFailsOnce:
    """A delivery whose first ack fails, as when the broker connection blips."""

    def __init__(self, delivery: Delivery, failed: set[str]) -> None:
        self._delivery = delivery
        self._failed = failed

    @property
    def body(self) -> bytes:
        return self._delivery.body

    @property
    def properties(self) -> Mapping[str, str]:
        return self._delivery.properties

    @property
    def redelivered(self) -> bool:
        return self._delivery.redelivered

    async def ack(self) -> None:
        call_id = self.properties.get(wire.PROP_ID, "")
        if call_id not in self._failed:
            self._failed.add(call_id)
            raise ConnectionError("ack lost")
        await self._delivery.ack()

    async def nack(self) -> None:
        await self._delivery.nack()


class _Subscription:
    def __init__(self, inner: Subscription, failed: set[str]) -> None:
        self._inner = inner
        self._failed = failed

    def __aiter__(self) -> AsyncIterator[Delivery]:
        return self._deliveries()

    async def _deliveries(self) -> AsyncIterator[Delivery]:
        async for delivery in self._inner:
            yield _AckFailsOnce(delivery, self._failed)  # type: ignore[misc]

    async def close(self) -> None:
        await self._inner.close()


class AckFailsOnceBus:
    """The memory bus, except that the first ack of each request fails."""

    def __init__(self, bus: MemoryBus) -> None:
        self._bus = bus
        self.failed: set[str] = set()
        self.max_message_size = bus.max_message_size

    async def publish(self, queue: str, body: bytes, properties: Any = None) -> None:
        await self._bus.publish(queue, body, properties)

    async def subscribe(self, queue: str, group: str | None = None) -> Any:
        return _Subscription(await self._bus.subscribe(queue, group), self.failed)

    async def close(self) -> None:
        await self._bus.close()


async def test_a_request_redelivered_after_its_answer_runs_the_tool_once(
    toolbus: ToolTestKit,
) -> None:
    service = counter()
    flaky = AckFailsOnceBus(toolbus.bus)
    async with (
        running(flaky, service),  # type: ignore[arg-type]
        tapped(toolbus.bus, service.response_queue) as tap,
    ):
        answer = await toolbus.call(service, {"text": "hi"})
        await settle()
    assert answer == "ok"
    assert len(flaky.failed) == 1  # the first ack failed: the broker redelivered the request
    assert len(service.calls) == 1
    first, second = [m.body for m in tap.messages]
    assert first == second


async def test_errors_and_streams_are_replayed_whole(toolbus: ToolTestKit) -> None:
    async def answer(arguments: dict[str, Any]) -> Any:
        if arguments["text"] == "missing":
            raise NotFound("no such thing")

        async def chunks() -> AsyncIterator[str]:
            yield "a"
            yield "b"

        return chunks()

    service = counter(answer=answer)
    await toolbus.serve(service)
    async with tapped(toolbus.bus, service.response_queue) as tap:
        for call_id, text in [("err", "missing"), ("stream", "x")]:
            await publish(toolbus.bus, service, call_id, text)
            await settle()
            await publish(toolbus.bus, service, call_id, text)
            await settle()
    assert len(service.calls) == 2
    errors = answers_for(tap, "err")
    assert len(errors) == 2 and errors[0] == errors[1]
    assert wire.decode_response(errors[0][0]).error_type == "not-found"
    streamed = answers_for(tap, "stream")
    assert len(streamed) == 6 and streamed[:3] == streamed[3:]


async def test_non_persistent_queues_keep_no_answers(toolbus: ToolTestKit) -> None:
    service = counter(NON_PERSISTENT)
    await toolbus.serve(service)
    for _ in range(2):
        await publish(toolbus.bus, service, "call-1")
        await settle()
    assert len(service.calls) == 2


async def test_retention_is_bounded_by_count(toolbus: ToolTestKit) -> None:
    service = counter()
    await toolbus.serve(service, idempotency_calls=2)
    for call_id in ["a", "b", "c", "a", "c"]:
        await publish(toolbus.bus, service, call_id)
        await settle()
    # "a" was forgotten when "c" came (oldest first), so it ran again; "c" did not.
    assert len(service.calls) == 4


async def test_retention_is_bounded_by_bytes(toolbus: ToolTestKit) -> None:
    service = counter()
    one_answer = len(wire.encode_response("ok"))
    await toolbus.serve(service, idempotency_bytes=2 * one_answer)
    for call_id in ["a", "b", "c", "a", "c"]:
        await publish(toolbus.bus, service, call_id)
        await settle()
    assert len(service.calls) == 4


async def test_retention_zero_turns_it_off(toolbus: ToolTestKit) -> None:
    service = counter()
    await toolbus.serve(service, idempotency_calls=0)
    for _ in range(2):
        await publish(toolbus.bus, service, "call-1")
        await settle()
    assert len(service.calls) == 2


async def test_a_different_request_reusing_an_answered_id_runs(toolbus: ToolTestKit) -> None:
    service = counter()
    await toolbus.serve(service)
    await publish(toolbus.bus, service, "1", "first question")
    await settle()
    await publish(toolbus.bus, service, "1", "another question")
    await settle()
    assert [call.arguments["text"] for call in service.calls] == [
        "first question",
        "another question",
    ]
