"""Session events shared between replicas over the bus (the in-memory bus, a real adapter)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import anyio
import pytest

from toolbus.memory import connect
from toolbus_gateway.events import Event
from toolbus_gateway.session_events import QUEUE, SessionEvents
from toolbus_gateway.sessions import SessionChannels

pytestmark = pytest.mark.anyio


@pytest.fixture
async def replicas() -> AsyncIterator[tuple[SessionEvents, SessionEvents]]:
    """Two replicas' session events on one bus, each following the other's."""
    async with AsyncExitStack() as stack:
        bus = await connect("memory://session-events")
        stack.push_async_callback(bus.close)
        tasks = await stack.enter_async_context(anyio.create_task_group())
        stack.callback(tasks.cancel_scope.cancel)
        pair = []
        for _ in range(2):
            events = SessionEvents(SessionChannels(), bus)
            messages = await events.subscribe()
            assert messages is not None
            stack.push_async_callback(messages.close)
            tasks.start_soon(events.follow, messages)
            pair.append(events)
        yield pair[0], pair[1]


async def test_a_call_on_one_replica_reaches_the_listeners_of_its_session_on_another(
    replicas: tuple[SessionEvents, SessionEvents],
) -> None:
    a, b = replicas
    with anyio.fail_after(5):
        async with (
            a.channels["alice", "s1"].events.subscribe() as alices,
            a.channels["bob", "s1"].events.subscribe() as bobs,
            b.channels["alice", "s1"].events.subscribe() as own,
        ):
            await b.call("alice", "s1", {"status": "ok"})
            await b.ended("alice", "s1", "closed")

            assert [event async for event in alices] == [
                Event("call", {"status": "ok"}),
                Event("closed", {"session_id": "s1", "reason": "closed"}),
            ]
            # The replica that made the call told its own listener once, not again.
            assert [event async for event in own] == [
                Event("call", {"status": "ok"}),
                Event("closed", {"session_id": "s1", "reason": "closed"}),
            ]
            # Another owner's session of the same id heard nothing (messages arrive in
            # order: anything routed to it would be there before alice's last one).
            assert ("bob", "s1") in a.channels
            with pytest.raises(anyio.WouldBlock):
                bobs.receive_nowait()


async def test_a_task_made_on_one_replica_shows_on_its_session_s_stream_on_another(
    replicas: tuple[SessionEvents, SessionEvents],
) -> None:
    """A session's call that became a task is made by whichever replica runs the task:
    its ``task`` events and the ``call`` it ends with reach the session's listeners on
    every replica, and a replica without a channel for the session makes none."""
    a, b = replicas
    with anyio.fail_after(5):
        async with a.channels["alice", "s4"].events.subscribe() as alices:
            await b.task("alice", "s4", {"id": "t1", "status": "working"})
            await b.task("alice", "s4", {"id": "t1", "status": "completed"})
            await b.call("alice", "s4", {"status": "ok"})
            assert ("alice", "s4") not in b.channels  # nobody listens there: no channel made
            await b.ended("alice", "s4", "closed")

            assert [event async for event in alices] == [
                Event("task", {"id": "t1", "status": "working"}),
                Event("task", {"id": "t1", "status": "completed"}),
                Event("call", {"status": "ok"}),
                Event("closed", {"session_id": "s4", "reason": "closed"}),
            ]


async def test_a_message_that_is_not_a_session_event_is_dropped_and_the_rest_go_on(
    replicas: tuple[SessionEvents, SessionEvents],
) -> None:
    a, b = replicas
    assert b.bus is not None
    with anyio.fail_after(5):
        async with a.channels["alice", "s2"].events.subscribe() as alices:
            await b.bus.publish(QUEUE, b"not json", {})
            await b.bus.publish(QUEUE, b'{"origin": "x"}', {})
            await b.call("alice", "s2", {"n": 1})
            assert await alices.receive() == Event("call", {"n": 1})


async def test_a_gateway_that_shares_no_sessions_tells_its_own_listeners_only() -> None:
    events = SessionEvents(SessionChannels(), None)
    assert await events.subscribe() is None
    with anyio.fail_after(5):
        async with events.channels["alice", "s3"].events.subscribe() as alices:
            await events.call("alice", "s3", {"n": 1})
            await events.ended("alice", "s3", "idle")
            assert [event async for event in alices] == [
                Event("call", {"n": 1}),
                Event("closed", {"session_id": "s3", "reason": "idle"}),
            ]
