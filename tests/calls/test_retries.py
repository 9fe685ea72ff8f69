"""The opt-in retry policy: ``unavailable`` and connection errors, where a retry is safe."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from prometheus_client import CollectorRegistry

from toolbus import ToolService, ToolServiceClient, running, tool_service
from toolbus.application.calls.metrics import ToolbusMetrics
from toolbus.application.calls.retries import RetryPolicy
from toolbus.domain.errors import BusClosed, Unavailable
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio

QUICK = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002)


class Flaky:
    """A tool that is unavailable for its first ``failures`` calls."""

    def __init__(self, failures: int, queue_kind: str) -> None:
        self.calls = 0
        flaky = self

        @tool_service(
            f"flaky-{uuid.uuid4().hex[:6]}",
            request_queue=f"{queue_kind}://test/request/flaky-{uuid.uuid4().hex[:6]}",
            response_queue=f"non-persistent://test/response/flaky-{uuid.uuid4().hex[:6]}",
        )
        async def service() -> str:
            flaky.calls += 1
            if flaky.calls <= failures:
                raise Unavailable("warming up; try again")
            return "done"

        self.service: ToolService = service


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://retries-{uuid.uuid4().hex}")
    yield bus
    await bus.close()


def retries(registry: CollectorRegistry, service: str, error_type: str) -> float:
    labels = {"service": service, "error_type": error_type}
    return registry.get_sample_value("toolbus_call_retries_total", labels) or 0.0


async def call(client: ToolServiceClient, service: ToolService) -> str:
    return await client.call(
        request_queue=service.request_queue,
        response_queue=service.response_queue,
        service=service.id,
        timeout=10,
    )


async def test_a_persistent_call_is_sent_again_until_it_succeeds(bus: MemoryBus) -> None:
    flaky, registry = Flaky(2, "persistent"), CollectorRegistry()
    metrics = ToolbusMetrics(registry)

    async with (
        running(bus, flaky.service),
        ToolServiceClient(bus, retry=QUICK, metrics=metrics) as client,
    ):
        assert await call(client, flaky.service) == "done"

    assert flaky.calls == 3
    assert retries(registry, flaky.service.id, "unavailable") == 2


async def test_the_last_error_stands_once_the_attempts_are_spent(bus: MemoryBus) -> None:
    flaky = Flaky(5, "persistent")

    async with running(bus, flaky.service), ToolServiceClient(bus, retry=QUICK) as client:
        with pytest.raises(Unavailable, match="warming up"):
            await call(client, flaky.service)

    assert flaky.calls == QUICK.attempts


async def test_a_non_persistent_call_is_not_retried_unless_the_tool_is_idempotent(
    bus: MemoryBus,
) -> None:
    once, again = Flaky(1, "non-persistent"), Flaky(1, "non-persistent")
    idempotent = RetryPolicy(attempts=3, first_wait=0.001, max_wait=0.002, idempotent=True)

    async with running(bus, once.service, again.service):
        async with ToolServiceClient(bus, retry=QUICK) as client:
            with pytest.raises(Unavailable):
                await call(client, once.service)
        async with ToolServiceClient(bus, retry=idempotent) as client:
            assert await call(client, again.service) == "done"

    assert (once.calls, again.calls) == (1, 2)


async def test_without_a_policy_nothing_is_retried(bus: MemoryBus) -> None:
    flaky = Flaky(1, "persistent")

    async with running(bus, flaky.service), ToolServiceClient(bus) as client:
        with pytest.raises(Unavailable):
            await call(client, flaky.service)

    assert flaky.calls == 1


async def test_a_connection_error_is_retried_and_counted(bus: MemoryBus) -> None:
    flaky, registry = Flaky(0, "persistent"), CollectorRegistry()
    metrics = ToolbusMetrics(registry)

    async with (
        running(bus, flaky.service),
        ToolServiceClient(bus, retry=QUICK, metrics=metrics) as client,
    ):
        assert await call(client, flaky.service) == "done"
        await bus.close()  # every publish now fails with a connection error
        with pytest.raises(BusClosed):
            await call(client, flaky.service)

    assert retries(registry, flaky.service.id, "connection") == QUICK.attempts - 1


def test_a_policy_that_cannot_work_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="first_wait <= max_wait"):
        RetryPolicy(first_wait=2, max_wait=1)
