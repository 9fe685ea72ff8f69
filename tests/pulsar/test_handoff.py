"""The hand-over from pulsar-client's threads to the event loop, without a broker."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from toolbus_pulsar.handoff import Handoff, blocking

pytestmark = pytest.mark.anyio


async def settle() -> None:
    for _ in range(3):
        await asyncio.sleep(0)


async def test_a_batch_of_calls_wakes_the_loop_once_and_keeps_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loop = asyncio.get_running_loop()
    wakeups: list[object] = []
    original = loop.call_soon_threadsafe

    def counting(callback: Any, *args: Any, **kwargs: Any) -> asyncio.Handle:
        wakeups.append(callback)
        return original(callback, *args, **kwargs)

    monkeypatch.setattr(loop, "call_soon_threadsafe", counting)
    to_loop = Handoff(loop)
    seen: list[int] = []
    for i in range(100):
        to_loop.call(seen.append, i)
    await settle()
    assert seen == list(range(100))
    assert len(wakeups) == 1
    to_loop.call(seen.append, 100)  # the next batch wakes it again
    await settle()
    assert seen[-1] == 100 and len(wakeups) == 2


async def test_calls_from_other_threads_all_arrive() -> None:
    to_loop = Handoff(asyncio.get_running_loop())
    seen: list[int] = []
    done = asyncio.Event()

    def note(value: int) -> None:
        seen.append(value)
        if len(seen) == 4000:
            done.set()

    def hammer(offset: int) -> None:
        for i in range(1000):
            to_loop.call(note, offset + i)

    threads = [threading.Thread(target=hammer, args=(n * 1000,)) for n in range(4)]
    for thread in threads:
        thread.start()
    await asyncio.wait_for(done.wait(), 10)
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(4000))


async def test_a_failing_call_does_not_lose_the_rest() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: reported.append(context))
    try:
        to_loop = Handoff(loop)
        seen: list[str] = []

        def explode() -> None:
            raise ValueError("boom")

        to_loop.call(seen.append, "before")
        to_loop.call(explode)
        to_loop.call(seen.append, "after")
        await settle()
    finally:
        loop.set_exception_handler(None)
    assert seen == ["before", "after"]
    assert isinstance(reported[0]["exception"], ValueError)


async def test_an_abandoned_blocking_call_is_cleaned_up() -> None:
    release = threading.Event()
    cleaned: list[str] = []
    cleaned_up = threading.Event()

    def make() -> str:
        release.wait(10)
        return "consumer"

    def clean(made: str) -> None:
        cleaned.append(made)
        cleaned_up.set()

    task = asyncio.ensure_future(blocking(make, cleanup=clean))
    await settle()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()  # the call finishes after its caller gave up...
    assert await asyncio.to_thread(cleaned_up.wait, 10)
    assert cleaned == ["consumer"]  # ...and what it made is disposed of
