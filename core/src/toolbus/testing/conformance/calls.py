"""Tool calls end to end over a bus: a client and service hosts, on the adapter."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the bus conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.calls.host import ServiceHost, running
from toolbus.application.calls.service import tool_service
from toolbus.domain.calls import wire
from toolbus.domain.errors import ToolServiceError, ToolTimeout
from toolbus.testing.conformance.binding import (
    FOUR_MB,
    BoundBus,
    BusFactory,
    echo_service,
    fresh_queue,
    next_delivery,
)


class CallsOverTheBus(BoundBus):
    """Round trips, concurrency, streams, large messages, errors and replicas dying."""

    # -- tool calls end to end ----------------------------------------------------

    async def test_call_round_trip(self, connect: BusFactory, stack: AsyncExitStack) -> None:
        bus = await connect()
        service = echo_service()
        await stack.enter_async_context(running(bus, service))
        client = await self._client(await connect(), stack)
        answer = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="alice",
            arguments={"text": "hi ✓"},
        )
        assert answer == "alice:hi ✓"
        assert client.pending == 0

    async def test_thousand_concurrent_calls_each_get_their_own_answer(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        service = echo_service()
        await stack.enter_async_context(running(await connect(), service, concurrency=64))
        client = await self._client(await connect(), stack)
        answers: dict[int, str] = {}

        async def one(i: int) -> None:
            answers[i] = await client.call(
                request_queue=service.request_queue,
                response_queue=service.response_queue,
                user="u",
                arguments={"text": str(i)},
            )

        with anyio.fail_after(self.settle_timeout * 6):
            async with anyio.create_task_group() as tasks:
                for i in range(1000):
                    tasks.start_soon(one, i)
        assert answers == {i: f"u:{i}" for i in range(1000)}
        assert client.pending == 0

    async def test_streamed_answer_arrives_in_chunks(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        @tool_service(
            f"stream-{uuid.uuid4().hex[:8]}",
            request_queue=fresh_queue(kind="request"),
            response_queue=fresh_queue(kind="response"),
        )
        async def count(n: int) -> AsyncIterator[str]:
            for i in range(n):
                yield f"<{i}>"

        await stack.enter_async_context(running(await connect(), count))
        client = await self._client(await connect(), stack)
        route: dict[str, Any] = {
            "request_queue": count.request_queue,
            "response_queue": count.response_queue,
        }
        chunks = [c async for c in client.stream(**route, arguments={"n": 3})]
        assert chunks == ["<0>", "<1>", "<2>"]
        assert await client.call(**route, arguments={"n": 4}) == "<0><1><2><3>"
        assert client.pending == 0

    async def test_four_megabyte_arguments_and_answer(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        service = echo_service()
        await stack.enter_async_context(running(await connect(), service))
        client = await self._client(await connect(), stack)
        text = "x" * (FOUR_MB - 1024)
        answer = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="u",
            arguments={"text": text},
        )
        assert answer == f"u:{text}"

    async def test_call_with_no_service_times_out_and_leaks_nothing(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        client = await self._client(await connect(), stack)
        with pytest.raises(ToolTimeout) as caught:
            await client.call(
                request_queue=fresh_queue(kind="request"),
                response_queue=fresh_queue(kind="response"),
                timeout=0.3,
                service="nobody-home",
            )
        assert "nobody-home" in str(caught.value) and "0.3" in str(caught.value)
        assert client.pending == 0

    async def test_tool_errors_come_back_and_the_service_keeps_serving(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        @tool_service(
            f"fragile-{uuid.uuid4().hex[:8]}",
            request_queue=fresh_queue(kind="request"),
            response_queue=fresh_queue(kind="response"),
        )
        async def fragile(fail: bool) -> str:
            if fail:
                raise RuntimeError("boom")
            return "fine"

        await stack.enter_async_context(running(await connect(), fragile))
        client = await self._client(await connect(), stack)
        route: dict[str, Any] = {
            "request_queue": fragile.request_queue,
            "response_queue": fragile.response_queue,
        }
        with pytest.raises(ToolServiceError, match="internal error in tool service"):
            await client.call(**route, arguments={"fail": True})
        assert await client.call(**route, arguments={"fail": False}) == "fine"

    async def test_replica_dying_mid_call_on_a_persistent_queue_is_covered_by_another(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        request_queue = fresh_queue(persistent=True, kind="request")
        response_queue = fresh_queue(kind="response")
        service_id = f"fragile-{uuid.uuid4().hex[:8]}"
        started = anyio.Event()

        @tool_service(service_id, request_queue=request_queue, response_queue=response_queue)
        async def hangs(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            started.set()
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

        @tool_service(service_id, request_queue=request_queue, response_queue=response_queue)
        async def answers(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            return "answered by the survivor"

        client = await self._client(await connect(), stack)
        doomed_bus = await connect()
        doomed = ServiceHost(doomed_bus, hangs, drain_timeout=0)
        result: list[str] = []
        answered = anyio.Event()
        async with anyio.create_task_group() as tasks:
            await tasks.start(doomed.serve)

            async def call() -> None:
                result.append(
                    await client.call(request_queue=request_queue, response_queue=response_queue)
                )
                answered.set()

            tasks.start_soon(call)
            with anyio.fail_after(self.settle_timeout):
                await started.wait()
            survivor = ServiceHost(await connect(), answers)
            await tasks.start(survivor.serve)
            doomed.stop()  # drain_timeout=0: the call is cut off, never acked
            await doomed_bus.close()
            with anyio.fail_after(self.settle_timeout * 4):
                await answered.wait()
            survivor.stop()
        assert result == ["answered by the survivor"]

    async def test_bad_requests_get_errors_and_leave_the_service_up(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        service = echo_service()
        await stack.enter_async_context(running(await connect(), service))
        raw = await connect()
        replies = await raw.subscribe(service.response_queue)
        cases = {
            "not-json": b"{nope",
            "wrong-shape": b"[1, 2, 3]",
            "config-not-json": b'{"user": "u", "config": "{bad", "arguments": "{}"}',
            "arguments-not-object": b'{"user": "u", "config": "{}", "arguments": "[1]"}',
            "not-utf8": b"\xff\xfe\xfd",
        }
        await raw.publish(service.request_queue, b"{}", {})  # no id: logged and dropped
        for call_id, body in cases.items():
            await raw.publish(service.request_queue, body, {wire.PROP_ID: call_id})
        errors: dict[str, wire.ToolResponse] = {}
        while len(errors) < len(cases):
            delivery = await next_delivery(replies, self.settle_timeout)
            errors[delivery.properties[wire.PROP_ID]] = wire.decode_response(delivery.body)
        assert {k: v.error_type for k, v in errors.items()} == dict.fromkeys(cases, "bad-request")
        client = await self._client(await connect(), stack)
        answer = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="still",
            arguments={"text": "up"},
        )
        assert answer == "still:up"
