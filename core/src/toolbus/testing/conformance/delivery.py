"""The delivery rules every bus keeps (docs/architecture.md, "Delivery rules"), and pushing
to a listener for the buses that push."""

from __future__ import annotations

import time
import uuid
from contextlib import AsyncExitStack
from typing import Any

import anyio

try:
    import pytest
except ImportError as exc:  # the core does not depend on pytest; the extra does
    raise ImportError(
        "the bus conformance suite needs pytest: pip install 'toolbus[testing]'"
    ) from exc

from toolbus.application.calls.host import ServiceHost
from toolbus.application.calls.service import tool_service
from toolbus.ports import Bus, Delivery, Listener, PushBus, Subscription
from toolbus.testing.conformance.binding import (
    FOUR_MB,
    BoundBus,
    BusFactory,
    fresh_queue,
    next_delivery,
)


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


class DeliveryRules(BoundBus):
    """Publishing, subscribing, acks and listeners, as every adapter must do them."""

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
