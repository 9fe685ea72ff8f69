"""The bus conformance suite: one set of tests every adapter must pass.

Bind it to an adapter by subclassing :class:`BusConformance` in a test module and
providing a ``bus_factory`` fixture: an async callable returning a *new*
connection each time it is awaited (several connections stand for several
processes). Each test uses fresh queue names, so a broker can be shared by the
whole session::

    class TestMyBus(BusConformance):
        @pytest.fixture
        def bus_factory(self, my_broker_url):
            return lambda: connect(my_broker_url)

Subclasses may override :attr:`settle_timeout` (seconds any single wait may take)
for brokers whose consumer groups take a while to form.

The suite is pytest tests: install it with ``pip install 'toolbus[testing]'``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the bus conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.calls.client import ToolServiceClient
from toolbus.application.calls.host import ServiceHost, running
from toolbus.application.calls.service import ToolService, tool_service
from toolbus.domain.calls import wire
from toolbus.domain.errors import ToolServiceError, ToolTimeout
from toolbus.ports import Bus, Delivery, Listener, PushBus, Subscription

BusFactory = Callable[[], Awaitable[Bus]]
FOUR_MB = 4 * 1024 * 1024


def fresh_queue(persistent: bool = False, kind: str = "q") -> str:
    scheme = "persistent" if persistent else "non-persistent"
    return f"{scheme}://conformance/{kind}/{uuid.uuid4().hex[:12]}"


async def next_delivery(subscription: Subscription, timeout: float) -> Delivery:
    with anyio.fail_after(timeout):
        async for delivery in subscription:
            return delivery
    raise AssertionError("the subscription ended before a message arrived")


def echo_service(persistent: bool = False) -> ToolService:
    request_queue = fresh_queue(persistent, "request")
    response_queue = fresh_queue(False, "response")

    @tool_service(
        f"echo-{uuid.uuid4().hex[:8]}",
        request_queue=request_queue,
        response_queue=response_queue,
    )
    async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
        return f"{user}:{arguments.get('text', '')}"

    return echo


class Collector:
    """A :class:`~toolbus.ports.MessageHandler` that keeps what it is given."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.fail_on = fail_on
        self.messages: list[Delivery] = []
        self.ends: list[BaseException | None] = []
        self.ended = anyio.Event()
        self.arrived = anyio.Event()
        self.listener: Listener | None = None

    def on_message(self, delivery: Delivery) -> None:
        if delivery.body == self.fail_on:
            raise RuntimeError("this handler refuses that message")
        self.messages.append(delivery)
        self.arrived.set()

    def on_end(self, error: BaseException | None) -> None:
        self.ends.append(error)
        self.ended.set()

    async def wait_for(self, count: int, timeout: float) -> list[Delivery]:
        with anyio.fail_after(timeout):
            while len(self.messages) < count:
                self.arrived = anyio.Event()
                await self.arrived.wait()
        return self.messages


@pytest.mark.anyio
class BusConformance:
    """The delivery rules of docs/wire-protocol.md, and tool calls end to end, on one adapter."""

    settle_timeout: float = 10.0

    @pytest.fixture
    def bus_factory(self) -> BusFactory:
        raise NotImplementedError("bind the suite by overriding the 'bus_factory' fixture")

    @pytest.fixture
    async def stack(self) -> AsyncIterator[AsyncExitStack]:
        async with AsyncExitStack() as stack:
            yield stack

    @pytest.fixture
    def connect(self, bus_factory: BusFactory, stack: AsyncExitStack) -> BusFactory:
        """A new connection, closed when the test ends."""

        async def open_bus() -> Bus:
            bus = await bus_factory()
            stack.push_async_callback(bus.close)
            return bus

        return open_bus

    async def _client(self, bus: Bus, stack: AsyncExitStack) -> ToolServiceClient:
        return await stack.enter_async_context(
            ToolServiceClient(bus, default_timeout=self.settle_timeout * 3)
        )

    # -- delivery rules -------------------------------------------------------

    async def test_publish_reaches_a_subscriber_with_body_and_properties(
        self, connect: BusFactory
    ) -> None:
        bus = await connect()
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        await bus.publish(queue, b"hello", {"id": "abc", "x": "1"})
        delivery = await next_delivery(subscription, self.settle_timeout)
        assert delivery.body == b"hello"
        assert delivery.properties["id"] == "abc"
        assert delivery.properties["x"] == "1"
        await delivery.ack()

    async def test_subscription_is_live_before_subscribe_returns(self, connect: BusFactory) -> None:
        publisher, subscriber = await connect(), await connect()
        for _ in range(5):
            queue = fresh_queue()
            subscription = await subscriber.subscribe(queue)
            await publisher.publish(queue, b"first", {"id": "1"})
            delivery = await next_delivery(subscription, self.settle_timeout)
            assert delivery.body == b"first"
            await subscription.close()

    async def test_fan_out_gives_every_subscription_every_message(
        self, connect: BusFactory
    ) -> None:
        queue = fresh_queue()
        subscriptions = [await (await connect()).subscribe(queue) for _ in range(3)]
        publisher = await connect()
        for i in range(10):
            await publisher.publish(queue, str(i).encode(), {"id": str(i)})
        for subscription in subscriptions:
            got = []
            for _ in range(10):
                delivery = await next_delivery(subscription, self.settle_timeout)
                got.append(delivery.body.decode())
                await delivery.ack()
            assert sorted(got, key=int) == [str(i) for i in range(10)]

    @pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
    async def test_competing_consumers_get_each_message_once(
        self, connect: BusFactory, persistent: bool
    ) -> None:
        queue = fresh_queue(persistent)
        group = f"g-{uuid.uuid4().hex[:8]}"
        members = [await (await connect()).subscribe(queue, group=group) for _ in range(3)]
        publisher = await connect()
        total = 60
        seen: list[str] = []
        done = anyio.Event()

        async def consume(subscription: Subscription) -> None:
            async for delivery in subscription:
                seen.append(delivery.body.decode())
                await delivery.ack()
                if len(seen) >= total:
                    done.set()

        async with anyio.create_task_group() as tasks:
            for member in members:
                tasks.start_soon(consume, member)
            for i in range(total):
                await publisher.publish(queue, str(i).encode(), {"id": str(i)})
            with anyio.fail_after(self.settle_timeout * 2):
                await done.wait()
            # Anything delivered twice would arrive now; give it one more round trip.
            marker = fresh_queue()
            probe = await publisher.subscribe(marker)
            await publisher.publish(marker, b"x", {"id": "x"})
            await next_delivery(probe, self.settle_timeout)
            tasks.cancel_scope.cancel()
        assert sorted(seen, key=int) == [str(i) for i in range(total)]

    async def test_several_tasks_can_read_one_subscription(self, connect: BusFactory) -> None:
        bus = await connect()
        queue = fresh_queue(persistent=True)
        subscription = await bus.subscribe(queue, group="pool")
        reader = aiter(subscription)
        total = 40
        seen: list[str] = []
        done = anyio.Event()

        async def read() -> None:
            while True:
                delivery = await anext(reader)
                seen.append(delivery.body.decode())
                await delivery.ack()
                if len(seen) == total:
                    done.set()

        async with anyio.create_task_group() as tasks:
            for _ in range(8):
                tasks.start_soon(read)
            await anyio.wait_all_tasks_blocked()
            for i in range(total):
                await bus.publish(queue, str(i).encode(), {"id": str(i)})
            with anyio.fail_after(self.settle_timeout * 2):
                await done.wait()
            tasks.cancel_scope.cancel()
        assert sorted(seen, key=int) == [str(i) for i in range(total)]

    async def test_unicode_bodies_and_properties_survive(self, connect: BusFactory) -> None:
        bus = await connect()
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        text = "héllo wörld — 日本語 — 🚀"
        await bus.publish(queue, text.encode(), {"id": "ü-1", "note": "naïve ✓"})
        delivery = await next_delivery(subscription, self.settle_timeout)
        assert delivery.body.decode() == text
        assert delivery.properties["note"] == "naïve ✓"
        assert delivery.properties["id"] == "ü-1"

    async def test_four_megabyte_message(self, connect: BusFactory) -> None:
        bus = await connect()
        queue = fresh_queue()
        subscription = await bus.subscribe(queue)
        body = bytes(range(256)) * (FOUR_MB // 256)
        await bus.publish(queue, body, {"id": "big"})
        delivery = await next_delivery(subscription, self.settle_timeout * 2)
        assert delivery.body == body

    async def test_nack_redelivers_on_a_persistent_queue(self, connect: BusFactory) -> None:
        bus = await connect()
        queue = fresh_queue(persistent=True)
        subscription = await bus.subscribe(queue, group="workers")
        await bus.publish(queue, b"again", {"id": "n1"})
        first = await next_delivery(subscription, self.settle_timeout)
        await first.nack()
        second = await next_delivery(subscription, self.settle_timeout * 3)
        assert second.body == b"again"
        assert second.redelivered
        await second.ack()

    async def test_a_persistent_delivery_says_when_it_was_published(
        self, connect: BusFactory
    ) -> None:
        """``enqueued_at``: the broker's timestamp, kept across redelivery (service hosts
        check call tokens as of then)."""
        bus = await connect()
        queue = fresh_queue(persistent=True)
        subscription = await bus.subscribe(queue, group="workers")
        before = time.time()
        await bus.publish(queue, b"when", {"id": "w1"})
        after = time.time()
        first = await next_delivery(subscription, self.settle_timeout)
        await first.nack()
        again = await next_delivery(subscription, self.settle_timeout * 3)
        await again.ack()
        enqueued = first.enqueued_at
        assert enqueued is not None
        # Brokers keep milliseconds; their clock is this machine's.
        assert before - 0.01 <= enqueued <= after + 0.01
        assert again.enqueued_at == enqueued

    async def test_unacked_message_goes_to_another_member_when_its_consumer_dies(
        self, connect: BusFactory
    ) -> None:
        queue = fresh_queue(persistent=True)
        doomed_bus = await connect()
        doomed = await doomed_bus.subscribe(queue, group="workers")
        publisher = await connect()
        await publisher.publish(queue, b"survive", {"id": "d1"})
        taken = await next_delivery(doomed, self.settle_timeout)
        assert taken.body == b"survive"
        survivor = await (await connect()).subscribe(queue, group="workers")
        await doomed_bus.close()  # dies without acking
        delivery = await next_delivery(survivor, self.settle_timeout * 3)
        assert delivery.body == b"survive"
        await delivery.ack()

    @pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
    async def test_a_member_that_stops_intake_hands_over_without_losing_a_message(
        self, connect: BusFactory, persistent: bool
    ) -> None:
        queue = fresh_queue(persistent)
        group = f"g-{uuid.uuid4().hex[:8]}"
        leaving = await (await connect()).subscribe(queue, group=group)
        staying = await (await connect()).subscribe(queue, group=group)
        publisher = await connect()
        before, after = 100, 100
        seen: list[str] = []

        async def take(delivery: Delivery) -> None:
            seen.append(delivery.body.decode())
            await delivery.ack()

        for i in range(before):
            await publisher.publish(queue, str(i).encode(), {"id": str(i)})
        await take(await next_delivery(leaving, self.settle_timeout))
        await leaving.stop_intake()
        # What the leaving member holds is still read; then its iteration ends by itself.
        with anyio.fail_after(self.settle_timeout * 2):
            async for delivery in leaving:
                await take(delivery)
        await leaving.close()
        for i in range(before, before + after):
            await publisher.publish(queue, str(i).encode(), {"id": str(i)})
        with anyio.fail_after(self.settle_timeout * 3):
            async for delivery in staying:
                await take(delivery)
                if len(seen) == before + after:
                    break
        assert sorted(seen, key=int) == [str(i) for i in range(before + after)]

    @pytest.mark.slow
    @pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
    async def test_a_replica_rolled_out_under_load_loses_no_call(
        self, connect: BusFactory, stack: AsyncExitStack, persistent: bool
    ) -> None:
        request_queue = fresh_queue(persistent, kind="request")
        response_queue = fresh_queue(kind="response")
        service_id = f"rolled-{uuid.uuid4().hex[:8]}"

        @tool_service(service_id, request_queue=request_queue, response_queue=response_queue)
        async def echo(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
            await anyio.sleep(0.002)  # long enough for calls to be in flight as it stops
            return str(arguments["n"])

        client = await self._client(await connect(), stack)
        old = ServiceHost(await connect(), echo, concurrency=8)
        new = ServiceHost(await connect(), echo, concurrency=8)
        answered: list[int] = []
        failed: list[str] = []
        enough = anyio.Event()
        counter = iter(range(10**9))

        async def caller() -> None:
            while not enough.is_set():
                n = next(counter)
                try:
                    answer = await client.call(
                        request_queue=request_queue,
                        response_queue=response_queue,
                        arguments={"n": n},
                        timeout=self.settle_timeout * 2,
                    )
                except Exception as exc:  # a lost call times out; anything else is wrong too
                    failed.append(f"call {n}: {exc!r}")
                    continue
                assert answer == str(n)
                answered.append(n)

        old_stopped = anyio.Event()

        async def serve_old(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
            await old.serve(task_status=task_status)
            old_stopped.set()

        async with anyio.create_task_group() as tasks:
            await tasks.start(serve_old)
            await tasks.start(new.serve)
            for _ in range(16):
                tasks.start_soon(caller)
            with anyio.fail_after(self.settle_timeout * 3):
                while len(answered) < 200:  # noqa: ASYNC110  # load is on: a while to see
                    await anyio.sleep(0.01)
                old.stop()  # the rollout: stop taking requests, answer what was taken
                await old_stopped.wait()
                mark = len(answered)
                while len(answered) < mark + 200:  # noqa: ASYNC110  # the new one serves
                    await anyio.sleep(0.01)
            enough.set()
            with anyio.fail_after(self.settle_timeout * 3):
                while client.pending:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            new.stop()
        assert failed == []
        assert old.handled > 0 and new.handled > 0

    async def test_closing_a_subscription_ends_its_iteration(self, connect: BusFactory) -> None:
        bus = await connect()
        subscription = await bus.subscribe(fresh_queue())
        ended = anyio.Event()

        async def drain() -> None:
            async for _ in subscription:
                pass
            ended.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(drain)
            await anyio.wait_all_tasks_blocked()
            await subscription.close()
            with anyio.fail_after(self.settle_timeout):
                await ended.wait()

    # -- pushing buses (optional: skipped for a bus that only subscribes) ---------

    async def _listener(
        self, bus: Bus, queue: str, stack: AsyncExitStack, **handler_options: Any
    ) -> Collector:
        if not isinstance(bus, PushBus):
            pytest.skip("this bus does not push (no listen())")
        collector = Collector(**handler_options)
        listener = await bus.listen(queue, collector)
        if listener is None:
            pytest.skip(f"this bus cannot push on {queue}")
        stack.push_async_callback(listener.close)
        collector.listener = listener
        return collector

    @pytest.mark.parametrize("persistent", [False, True], ids=["non-persistent", "persistent"])
    async def test_a_listener_gets_every_message_in_order_and_is_live_at_once(
        self, connect: BusFactory, stack: AsyncExitStack, persistent: bool
    ) -> None:
        publisher, listening = await connect(), await connect()
        queue = fresh_queue(persistent)
        collector = await self._listener(listening, queue, stack)
        subscription = await listening.subscribe(queue)  # fan-out alongside the listener
        for n in range(50):
            await publisher.publish(queue, f"m{n}".encode(), {"id": str(n), "note": "ö"})
        messages = await collector.wait_for(50, self.settle_timeout)
        assert [m.body for m in messages] == [f"m{n}".encode() for n in range(50)]
        assert [m.properties["id"] for m in messages] == [str(n) for n in range(50)]
        assert messages[0].properties["note"] == "ö"
        assert (await next_delivery(subscription, self.settle_timeout)).body == b"m0"

    async def test_a_failing_handler_loses_only_its_own_message(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        bus = await connect()
        queue = fresh_queue()
        collector = await self._listener(bus, queue, stack, fail_on=b"bad")
        for body in (b"one", b"bad", b"two"):
            await bus.publish(queue, body, {"id": "x"})  # never raises for the handler
        messages = await collector.wait_for(2, self.settle_timeout)
        assert [m.body for m in messages] == [b"one", b"two"]

    async def test_closing_a_listener_ends_it_once_and_stops_messages(
        self, connect: BusFactory, stack: AsyncExitStack
    ) -> None:
        bus = await connect()
        queue = fresh_queue()
        collector = await self._listener(bus, queue, stack)
        await bus.publish(queue, b"before", {"id": "1"})
        await collector.wait_for(1, self.settle_timeout)
        assert collector.listener is not None
        await collector.listener.close()
        await collector.listener.close()  # twice is harmless
        await bus.publish(queue, b"after", {"id": "2"})
        # A subscriber made after the publish proves it went out and was not held back.
        witness = await bus.subscribe(queue)
        await bus.publish(queue, b"witness", {"id": "3"})
        await next_delivery(witness, self.settle_timeout)
        assert [m.body for m in collector.messages] == [b"before"]
        assert collector.ends == [None]

    async def test_closing_the_bus_ends_its_listeners(
        self, bus_factory: BusFactory, stack: AsyncExitStack
    ) -> None:
        bus = await bus_factory()
        collector = await self._listener(bus, fresh_queue(), stack)
        await bus.close()
        with anyio.fail_after(self.settle_timeout):
            await collector.ended.wait()
        assert len(collector.ends) == 1

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
