"""Answering inline (Python 3.12+): a request's call starts in the call that brought it.

On the in-memory bus (and core NATS) a host stands by on its subscription; where
the interpreter can start a task eagerly, a tool that does not wait is answered
before the publisher's call returns. The call must still run as a task of its own,
in the host's context, within the host's concurrency, and be drained on stop —
as a worker's call is on Python 3.11, where every request goes to a worker.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from contextvars import ContextVar

import anyio
import pytest

from toolbus import ToolServiceClient, running, tool_service
from toolbus.application.calls.client import YIELD_EVERY
from toolbus.application.calls.host import ANSWERS_INLINE
from toolbus.domain.calls import wire
from toolbus.memory.bus import MemoryBus, connect
from toolbus.ports import Delivery

pytestmark = pytest.mark.anyio

WAIT = 5.0  # the most any single expected event may take; never slept

_callers_mark: ContextVar[str] = ContextVar("callers_mark", default="unset")


def queues(name: str, kind: str = "non-persistent") -> dict[str, str]:
    return {
        "request_queue": f"{kind}://test/request/{name}",
        "response_queue": f"non-persistent://test/response/{name}",
    }


async def fresh_bus() -> MemoryBus:
    return await connect(f"memory://inline-{uuid.uuid4().hex[:8]}")


def test_calls_are_answered_inline_from_python_3_12_on() -> None:
    assert ANSWERS_INLINE is (sys.version_info >= (3, 12))


async def test_a_tool_that_does_not_wait_is_answered_before_the_publish_returns() -> None:
    @tool_service("quick", **queues("quick"))
    async def quick(text: str) -> str:
        return text.upper()

    answers: list[Delivery] = []
    answered = asyncio.Event()

    class Collect:
        def on_message(self, delivery: Delivery) -> None:
            answers.append(delivery)
            answered.set()

        def on_end(self, error: BaseException | None) -> None:
            pass

    bus = await fresh_bus()
    async with running(bus, quick):
        listener = await bus.listen(quick.response_queue, Collect())
        body = wire.encode_request("", None, {"text": "hi"})
        await bus.publish(quick.request_queue, body, {wire.PROP_ID: "call-1"})
        answered_at_once = len(answers)
        with anyio.fail_after(WAIT):
            await answered.wait()  # a worker takes it (Python 3.11)
        await listener.close()

    assert answered_at_once == (1 if ANSWERS_INLINE else 0)
    assert wire.decode_response(answers[0].body).response == "HI"


async def test_a_tool_waiting_in_cancel_scopes_on_its_first_step_answers_as_its_own_task() -> None:
    # The failure answering inline had without eager tasks: the tool's first step ran
    # as the caller's task, and leaving a cancel scope entered there broke.
    tasks: list[asyncio.Task[object] | None] = []

    @tool_service("scoped", **queues("scoped"))
    async def scoped(text: str) -> str:
        tasks.append(asyncio.current_task())
        with anyio.fail_after(WAIT):
            await asyncio.sleep(0.001)
        async with asyncio.timeout(WAIT):
            await asyncio.sleep(0)
        return text

    bus = await fresh_bus()
    async with running(bus, scoped), ToolServiceClient(bus) as client:
        answers = [
            await client.call(**queues("scoped"), arguments={"text": str(n)}) for n in range(3)
        ]
        caller = asyncio.current_task()

    assert answers == ["0", "1", "2"]
    assert caller not in tasks and None not in tasks


async def test_the_callers_context_variables_do_not_reach_the_tool() -> None:
    seen: list[str] = []

    @tool_service("context", **queues("context"))
    async def context() -> str:
        seen.append(_callers_mark.get())
        return "ok"

    bus = await fresh_bus()
    async with running(bus, context), ToolServiceClient(bus) as client:
        token = _callers_mark.set("the caller's")
        try:
            await client.call(**queues("context"))
        finally:
            _callers_mark.reset(token)

    assert seen == ["unset"]


@pytest.mark.parametrize("kind", ["call", "stream"])
async def test_a_loop_of_calls_answered_inline_lets_the_other_tasks_run(kind: str) -> None:
    # Calls answered inside their publish must still yield to the event loop now and
    # then: a task calling in a loop would otherwise keep every other task from running.
    @tool_service("loop", **queues("loop"))
    async def loop(text: str) -> str:
        return text

    others_ran = asyncio.Event()
    bus = await fresh_bus()
    async with running(bus, loop), ToolServiceClient(bus) as client:

        async def once() -> None:
            if kind == "call":
                await client.call(**queues("loop"), arguments={"text": "x"})
            else:
                async for _ in client.stream(**queues("loop"), arguments={"text": "x"}):
                    pass

        async def other_task() -> None:
            others_ran.set()

        await once()  # the listener subscribed: from here calls need no other task
        other = asyncio.get_running_loop().create_task(other_task())
        calls = 0
        while not others_ran.is_set() and calls < 5 * YIELD_EVERY:
            await once()
            calls += 1
        await other

    assert calls <= YIELD_EVERY  # the other task ran within so many calls


async def test_calls_inline_and_by_workers_together_stay_within_the_concurrency() -> None:
    running_now = 0
    most = 0
    full = asyncio.Event()
    release = asyncio.Event()

    @tool_service("bounded", **queues("bounded"))
    async def bounded(n: int) -> str:
        nonlocal running_now, most
        running_now += 1
        most = max(most, running_now)
        if running_now == 3:
            full.set()
        try:
            await release.wait()
        finally:
            running_now -= 1
        return str(n)

    bus = await fresh_bus()
    async with running(bus, bounded, concurrency=3), ToolServiceClient(bus) as client:
        calls = [
            asyncio.create_task(client.call(**queues("bounded"), arguments={"n": n}))
            for n in range(12)
        ]
        with anyio.fail_after(WAIT):
            await full.wait()
        held = running_now
        release.set()
        with anyio.fail_after(WAIT):
            answers = await asyncio.gather(*calls)

    assert held == 3 and most == 3
    assert answers == [str(n) for n in range(12)]


async def test_stopping_lets_a_call_answered_inline_finish() -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    @tool_service("slow", **queues("slow"))
    async def slow() -> str:
        started.set()
        await release.wait()
        return "finished"

    bus = await fresh_bus()
    async with ToolServiceClient(bus) as client:
        call: asyncio.Task[str] | None = None
        async with running(bus, slow, drain_timeout=WAIT) as (host,):
            call = asyncio.create_task(client.call(**queues("slow")))
            with anyio.fail_after(WAIT):
                await started.wait()
            asyncio.get_running_loop().call_later(0.05, release.set)
        # Leaving the block stopped the host; it waited for the call in flight.
        assert host.in_flight == 0
        with anyio.fail_after(WAIT):
            assert await call == "finished"


async def test_a_persistent_request_answered_inline_is_acked_once_and_not_run_again() -> None:
    runs: list[str] = []

    @tool_service("kept", **queues("kept", "persistent"))
    async def kept(text: str) -> str:
        runs.append(text)
        return text

    bus = await fresh_bus()
    async with ToolServiceClient(bus) as client:
        async with running(bus, kept):
            assert await client.call(**queues("kept", "persistent"), arguments={"text": "a"}) == "a"
        # A new replica on the same queue finds nothing left to redeliver.
        async with running(bus, kept):
            assert await client.call(**queues("kept", "persistent"), arguments={"text": "b"}) == "b"

    assert runs == ["a", "b"]


async def test_a_persistent_request_cut_off_while_answered_inline_goes_back_to_the_queue() -> None:
    runs: list[str] = []
    never = asyncio.Event()
    started = asyncio.Event()

    @tool_service("redo", **queues("redo", "persistent"))
    async def redo(text: str) -> str:
        runs.append(text)
        started.set()
        if len(runs) == 1:
            await never.wait()  # the first replica is stopped in the middle
        return text

    bus = await fresh_bus()
    async with ToolServiceClient(bus) as client:
        call = asyncio.create_task(
            client.call(**queues("redo", "persistent"), arguments={"text": "x"}, timeout=WAIT)
        )
        async with running(bus, redo, drain_timeout=0):
            with anyio.fail_after(WAIT):
                await started.wait()
        # Cut off unacked: the next replica gets the request again and answers it.
        async with running(bus, redo):
            with anyio.fail_after(WAIT):
                assert await call == "x"

    assert runs == ["x", "x"]
