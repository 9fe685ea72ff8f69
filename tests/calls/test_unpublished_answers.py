"""An answer the broker will not take: the broker failed, not the tool.

On a persistent queue the request goes back to the broker and is answered when
it comes again (from the answers the host remembers, so the tool does not run
twice); on a non-persistent one nothing can answer it again. Either way it is
counted and said once, and never answered as a tool error.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from prometheus_client import CollectorRegistry

import toolbus
from tests.context.support import Recorder
from toolbus import ToolServiceClient
from toolbus.application.calls.host import running
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.domain.errors import BusClosed, ToolTimeout
from toolbus.memory.bus import MemoryBus
from toolbus.ports import Subscription

pytestmark = pytest.mark.anyio

RESPONSES = "non-persistent://acme/tools/echo-responses"


class RefusingAnswersBus:
    """The in-memory bus, except that the broker refuses the first answers a host sends."""

    def __init__(self, bus: MemoryBus, refusals: int) -> None:
        self._bus = bus
        self.refusals = refusals
        self.max_message_size = bus.max_message_size

    async def publish(self, queue: str, body: bytes, properties: Any = None) -> None:
        if queue == RESPONSES and self.refusals > 0:
            self.refusals -= 1
            raise BusClosed("the broker went away (refused for the test)")
        await self._bus.publish(queue, body, properties)

    async def subscribe(self, queue: str, group: str | None = None) -> Subscription:
        return await self._bus.subscribe(queue, group)

    async def close(self) -> None:
        await self._bus.close()


def echo(request_queue: str) -> Recorder:
    return Recorder(
        "echo",
        request_queue=request_queue,
        response_queue=RESPONSES,
        answer=lambda arguments: arguments["text"],
    )


def unpublished(metrics: ToolbusMetrics, outcome: str) -> float:
    value = metrics.registry.get_sample_value(
        "toolbus_service_unpublished_answers_total", {"service": "echo", "outcome": outcome}
    )
    return value or 0.0


@pytest.fixture
def metrics() -> ToolbusMetrics:
    return ToolbusMetrics(registry=CollectorRegistry())


async def test_on_a_persistent_queue_the_request_is_handed_back_and_answered_once_it_can_be(
    metrics: ToolbusMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    service = echo("persistent://acme/tools/echo-requests")
    bus = await toolbus.connect("memory://unpublished-persistent")
    refusing = RefusingAnswersBus(bus, refusals=3)
    try:
        async with (
            running(refusing, service, metrics=metrics),  # type: ignore[arg-type]
            ToolServiceClient(bus, default_timeout=30) as client,
        ):
            answer = await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                arguments={"text": "hello"},
            )
    finally:
        await bus.close()

    assert answer == "hello"  # not an "internal error"
    assert len(service.calls) == 1  # handed back three times, the tool ran once
    assert unpublished(metrics, "handed-back") == 3
    said = [r for r in caplog.records if "did not take the answer" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "Traceback" not in caplog.text


async def test_on_a_non_persistent_queue_the_call_is_lost_and_counted_not_answered_wrongly(
    metrics: ToolbusMetrics, caplog: pytest.LogCaptureFixture
) -> None:
    service = echo("non-persistent://acme/tools/echo-requests")
    bus = await toolbus.connect("memory://unpublished-non-persistent")
    refusing = RefusingAnswersBus(bus, refusals=2)  # the answer, and an error if one were sent
    try:
        async with (
            running(refusing, service, metrics=metrics),  # type: ignore[arg-type]
            ToolServiceClient(bus) as client,
        ):
            with pytest.raises(ToolTimeout):
                await client.call(
                    request_queue=service.request_queue,
                    response_queue=service.response_queue,
                    arguments={"text": "hello"},
                    timeout=1,
                )
            assert refusing.refusals == 1  # no error answer was tried after the refusal
    finally:
        await bus.close()

    assert unpublished(metrics, "lost") == 1
    (said,) = [r for r in caplog.records if "did not take the answer" in r.getMessage()]
    assert "waits out its timeout" in said.getMessage()


async def test_an_answer_too_large_for_the_broker_is_still_answered_with_an_error(
    metrics: ToolbusMetrics,
) -> None:
    service = Recorder(
        "echo",
        request_queue="persistent://acme/tools/echo-requests",
        response_queue=RESPONSES,
        answer=lambda arguments: "x" * 4096,
    )
    bus = await toolbus.connect("memory://unpublished-large?max_message_size=2048")
    try:
        async with (
            running(bus, service, metrics=metrics),
            ToolServiceClient(bus, default_timeout=10) as client,
        ):
            with anyio.fail_after(10), pytest.raises(toolbus.ToolCallError):
                await client.call(
                    request_queue=service.request_queue,
                    response_queue=service.response_queue,
                    arguments={"text": "big"},
                )
    finally:
        await bus.close()

    # The next try would be just as large: no redelivery, and the tool ran once.
    assert len(service.calls) == 1
    assert unpublished(metrics, "handed-back") == 0
