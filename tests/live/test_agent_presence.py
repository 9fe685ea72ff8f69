"""Agent services say on the bus that they answer; an asker hears at once whether one does."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

from toolbus.application.live.agent_presence import (
    AGENT_ANNOUNCEMENTS_QUEUE,
    AgentPresence,
    agent_service_answers,
)
from toolbus.domain.live import announcements as messages
from toolbus.domain.live.announcements import Announcement, Withdrawal
from toolbus.memory.bus import MemoryBus, connect

pytestmark = pytest.mark.anyio

REQUESTS = "non-persistent://q/request"
REPLIES = "non-persistent://q/reply"


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://agents-{uuid.uuid4().hex}")
    yield bus
    await bus.close()


async def test_an_asker_hears_an_agent_service_until_it_stops(bus: MemoryBus) -> None:
    presence = AgentPresence(bus, REQUESTS, REPLIES)
    assert not await agent_service_answers(bus, REQUESTS, 0.2)

    async with anyio.create_task_group() as group:
        await group.start(presence.run)
        with anyio.fail_after(10):
            # A probe is answered (within the probes' cool-down), not only the start.
            assert await agent_service_answers(bus, REQUESTS, 5)
            assert await agent_service_answers(bus, REQUESTS, 5)
        assert not await agent_service_answers(bus, "non-persistent://other/queue", 0.2)
        presence.stop()

    assert not await agent_service_answers(bus, REQUESTS, 0.2)


async def test_a_stopped_presence_withdraws_what_it_announced(bus: MemoryBus) -> None:
    heard = await bus.subscribe(AGENT_ANNOUNCEMENTS_QUEUE)
    presence = AgentPresence(bus, REQUESTS, REPLIES)
    async with anyio.create_task_group() as group:
        await group.start(presence.run)
        presence.stop()

    with anyio.fail_after(5):
        received = [messages.decode((await anext(aiter(heard))).body) for _ in range(2)]
    await heard.close()
    announced, withdrawn = received
    assert isinstance(announced, Announcement)
    assert announced.descriptor["request-queue"] == REQUESTS
    assert announced.descriptor["response-queue"] == REPLIES
    assert announced.tools == {}
    assert withdrawn == Withdrawal(announced.service, announced.instance)
