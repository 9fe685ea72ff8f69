"""An answer that arrives after its call's end of stream is reported, not dropped silently.

The "service" here is a raw responder on the in-memory bus that sends a call's
messages in the order a broker with several partitions may deliver them: the
end of the stream before its last chunk.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from toolbus import ToolServiceClient, ToolTimeout
from toolbus.domain.calls import wire
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio

REQUESTS = "non-persistent://tg/request/scrambled"
RESPONSES = "non-persistent://tg/response/scrambled"


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://late-{uuid.uuid4().hex}")
    yield bus
    await bus.close()


async def scrambled_responder(bus: MemoryBus, late: list[bytes]) -> None:
    """Answers each request with "a", then the end of the stream, then ``late``."""
    requests = await bus.subscribe(REQUESTS, group="responder")
    async for request in requests:
        reply = {wire.PROP_ID: request.properties[wire.PROP_ID]}
        await bus.publish(RESPONSES, wire.encode_response("a", end_of_stream=False), reply)
        await bus.publish(RESPONSES, wire.encode_response(""), reply)
        for body in late:
            await bus.publish(RESPONSES, body, reply)
        await request.ack()


async def test_a_chunk_after_the_end_of_its_stream_is_logged_and_counted(
    bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    late = [wire.encode_response("b", end_of_stream=False), wire.encode_response("")]
    async with anyio.create_task_group() as tasks, ToolServiceClient(bus) as client:
        tasks.start_soon(scrambled_responder, bus, late)
        with caplog.at_level(logging.WARNING, logger="toolbus.client"):
            first = [
                c async for c in client.stream(request_queue=REQUESTS, response_queue=RESPONSES)
            ]
            second = await client.call(request_queue=REQUESTS, response_queue=RESPONSES)
        listener = client._listeners[RESPONSES]
        tasks.cancel_scope.cancel()

    # The in-memory bus hands each message to the client inside publish(), so the
    # late ones have arrived by the time the responder sent the next call's answer.
    assert first == ["a"] and second == "a"
    assert listener.late_chunks == 4
    reports = [r for r in caplog.records if "after the call's end of stream" in r.getMessage()]
    assert len(reports) == 1  # one line a minute per response queue, with a count
    assert RESPONSES in reports[0].getMessage()
    assert client.pending == 0


async def test_answers_of_other_clients_and_of_timed_out_calls_are_not_reported(
    bus: MemoryBus, caplog: pytest.LogCaptureFixture
) -> None:
    release = anyio.Event()

    async def answers_too_late() -> None:
        requests = await bus.subscribe(REQUESTS, group="responder")
        async for request in requests:
            await release.wait()
            reply = {wire.PROP_ID: request.properties[wire.PROP_ID]}
            await bus.publish(RESPONSES, wire.encode_response("too late"), reply)
            await bus.publish(RESPONSES, wire.encode_response("not ours"), {wire.PROP_ID: "x"})
            await request.ack()
            answered.set()

    answered = anyio.Event()
    async with anyio.create_task_group() as tasks, ToolServiceClient(bus) as client:
        tasks.start_soon(answers_too_late)
        with caplog.at_level(logging.WARNING, logger="toolbus.client"):
            with pytest.raises(ToolTimeout):
                await client.call(request_queue=REQUESTS, response_queue=RESPONSES, timeout=0.05)
            release.set()
            await answered.wait()
        listener = client._listeners[RESPONSES]
        tasks.cancel_scope.cancel()

    assert listener.late_chunks == 0
    assert not [r for r in caplog.records if "end of stream" in r.getMessage()]
