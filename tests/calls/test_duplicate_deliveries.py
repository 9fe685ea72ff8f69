"""A copy of a request redelivered while the first is still running waits for its outcome."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from toolbus import ServiceHost, tool_service
from toolbus.domain.calls import wire
from toolbus.memory.bus import connect

pytestmark = pytest.mark.anyio


class RecordingDelivery:
    """A Delivery (the port) that remembers how it was settled."""

    def __init__(self, body: bytes, properties: Mapping[str, str]) -> None:
        self.body = body
        self.properties = properties
        self.redelivered = True
        self.settled: list[str] = []

    async def ack(self) -> None:
        self.settled.append("ack")

    async def nack(self) -> None:
        self.settled.append("nack")


async def test_the_copy_is_acked_once_the_first_delivery_answered_and_the_tool_ran_once() -> None:
    started, release = anyio.Event(), anyio.Event()
    runs: list[str] = []

    @tool_service("slow", request_queue=f"persistent://t/n/slow-{uuid.uuid4().hex[:6]}")
    async def slow(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        runs.append(user)
        started.set()
        await release.wait()
        return "done"

    bus = await connect(f"memory://dup-{uuid.uuid4().hex}")
    host = ServiceHost(bus, slow)
    body = wire.encode_request("u", None, {"x": 1})
    first = RecordingDelivery(body, {wire.PROP_ID: "call-1"})
    copy = RecordingDelivery(body, {wire.PROP_ID: "call-1"})
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(host.handle, first)
        await started.wait()
        tasks.start_soon(host.handle, copy)
        await anyio.wait_all_tasks_blocked()
        assert copy.settled == [], "the copy must wait for the first delivery's outcome"
        release.set()
    assert first.settled == ["ack"] and copy.settled == ["ack"]
    assert runs == ["u"]
    await bus.close()


async def test_the_copy_goes_back_to_the_broker_when_the_first_delivery_is_cut_off() -> None:
    started = anyio.Event()

    @tool_service("stuck", request_queue=f"persistent://t/n/stuck-{uuid.uuid4().hex[:6]}")
    async def stuck(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    bus = await connect(f"memory://dup-{uuid.uuid4().hex}")
    host = ServiceHost(bus, stuck)
    body = wire.encode_request("u", None, {})
    first = RecordingDelivery(body, {wire.PROP_ID: "call-2"})
    copy = RecordingDelivery(body, {wire.PROP_ID: "call-2"})
    first_scope = anyio.CancelScope()

    async def run_first() -> None:
        with first_scope:
            await host.handle(first)

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(run_first)
        await started.wait()
        tasks.start_soon(host.handle, copy)
        await anyio.wait_all_tasks_blocked()
        first_scope.cancel()  # what a drain timeout does to a call that overstays
    assert first.settled == []  # never acked: the broker still owns it
    assert copy.settled == ["nack"], "the call must not be lost with the first delivery"
    await bus.close()
