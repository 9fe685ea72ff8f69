"""Persistent queues on JetStream: streams, shared durable consumers, progress, dead letters."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import nats
import pytest
from nats.aio.client import Client
from nats.js.api import AckPolicy, RetentionPolicy
from nats.js.client import JetStreamContext

from tests.nats.processes import serve
from tests.nats.server import TEST_ACK_WAIT
from toolbus import ToolServiceClient
from toolbus.testing.conformance import fresh_queue, next_delivery
from toolbus_nats import NatsBus, connect, consumer_name, dead_letter_subject, stream_name
from toolbus_nats.subscription.jetstream import (
    DEAD_LETTER_DELIVERIES,
    DEAD_LETTER_REASON,
    DEAD_LETTER_SUBJECT,
)

pytestmark = [pytest.mark.anyio, pytest.mark.broker]


@pytest.fixture
async def plain_nc(nats_url: str) -> AsyncIterator[Client]:
    """A plain nats-py connection, to look at what the adapter made."""
    nc = await nats.connect(nats_url.partition("?")[0])
    yield nc
    await nc.close()


@pytest.fixture
def js(plain_nc: Client) -> JetStreamContext:
    return plain_nc.jetstream()


@pytest.fixture
async def buses(nats_url: str) -> AsyncIterator[list[NatsBus]]:
    """Buses opened by the test through ``open_bus``; all closed at the end."""
    opened: list[NatsBus] = []
    yield opened
    for bus in opened:
        await bus.close()


async def open_bus(buses: list[NatsBus], url: str, **options: object) -> NatsBus:
    bus = await connect(url, options)
    buses.append(bus)
    return bus


def dotted(queue: str) -> str:
    return queue.partition("://")[2].replace("/", ".")


async def test_a_group_is_one_durable_consumer_on_an_interest_stream(
    nats_url: str, buses: list[NatsBus], js: JetStreamContext
) -> None:
    queue = fresh_queue(persistent=True)
    subject = dotted(queue)
    for _ in range(2):  # two replicas of one service
        await (await open_bus(buses, nats_url)).subscribe(queue, group="joke-service")

    stream = await js.stream_info(stream_name(subject))
    assert stream.config.subjects == [subject]
    assert stream.config.retention == RetentionPolicy.INTEREST
    consumers = await js.consumers_info(stream_name(subject))
    assert [c.name for c in consumers] == [consumer_name("joke-service")]
    config = consumers[0].config
    assert config.durable_name == "joke-service"
    assert config.ack_policy == AckPolicy.EXPLICIT
    assert config.ack_wait == TEST_ACK_WAIT
    assert config.max_deliver == 5 + 1  # the extra delivery is the dead-lettering one


async def test_messages_wait_for_a_group_while_none_of_its_members_runs(
    nats_url: str, buses: list[NatsBus]
) -> None:
    queue = fresh_queue(persistent=True)
    member = await open_bus(buses, nats_url)
    await (await member.subscribe(queue, group="workers")).close()  # the group exists
    publisher = await open_bus(buses, nats_url)
    for i in range(3):
        await publisher.publish(queue, f"m{i}".encode(), {"id": str(i)})

    later = await (await open_bus(buses, nats_url)).subscribe(queue, group="workers")
    got = []
    for _ in range(3):
        delivery = await next_delivery(later, 10)
        got.append(delivery.body)
        await delivery.ack()
    assert got == [b"m0", b"m1", b"m2"]


async def test_a_live_member_keeps_its_delivery_past_the_ack_wait(
    nats_url: str, buses: list[NatsBus], js: JetStreamContext
) -> None:
    ack_wait = 0.5
    queue = fresh_queue(persistent=True)
    slow = await (await open_bus(buses, nats_url, ack_wait=ack_wait)).subscribe(queue, "workers")
    other = await (await open_bus(buses, nats_url, ack_wait=ack_wait)).subscribe(queue, "workers")
    await (await open_bus(buses, nats_url)).publish(queue, b"long call", {"id": "1"})
    held = await next_delivery(slow, 10)
    # A long tool call: its replica reports progress, so nobody else gets the message.
    with anyio.move_on_after(ack_wait * 4):
        stolen = await next_delivery(other, 60)
        pytest.fail(f"redelivered while its consumer was alive: {stolen.body!r}")
    info = await js.consumer_info(stream_name(dotted(queue)), "workers")
    assert info.num_redelivered == 0 and info.num_ack_pending == 1
    await held.ack()


async def test_a_message_never_acked_goes_to_the_dead_letter_subject(
    nats_url: str, buses: list[NatsBus], plain_nc: Client
) -> None:
    queue = fresh_queue(persistent=True)
    subject = dotted(queue)
    # JetStream announces every terminated message: proof it is never delivered again.
    terminated = await plain_nc.subscribe(
        f"$JS.EVENT.ADVISORY.CONSUMER.MSG_TERMINATED.{stream_name(subject)}.workers"
    )
    await plain_nc.flush()
    bus = await open_bus(buses, nats_url, max_deliveries=2)
    # The dead letters, read as a plain (persistent) toolbus queue by an operator.
    dead = await bus.subscribe(dead_letter_subject(subject))
    worker = await bus.subscribe(queue, group="workers")
    await bus.publish(queue, b"poison", {"id": "p-1", "traceparent": "00-abc-def-01"})

    for attempt in (1, 2):
        delivery = await next_delivery(worker, 10)
        assert delivery.body == b"poison" and delivery.redelivered == (attempt > 1)
        await delivery.nack()
    letter = await next_delivery(dead, 10)
    assert letter.body == b"poison"
    assert letter.properties["id"] == "p-1"
    assert letter.properties["traceparent"] == "00-abc-def-01"
    assert letter.properties[DEAD_LETTER_DELIVERIES] == "2"
    assert letter.properties[DEAD_LETTER_SUBJECT] == subject
    assert "not acknowledged after 2 deliveries" in letter.properties[DEAD_LETTER_REASON]
    await letter.ack()

    advisory = json.loads((await terminated.next_msg(timeout=10)).data)
    assert advisory["stream_seq"] == 1 and advisory["deliveries"] == 3
    info = await plain_nc.jetstream().consumer_info(stream_name(subject), "workers")
    assert info.num_ack_pending == 0 and info.num_pending == 0


async def test_fan_out_on_a_persistent_queue_gets_every_message_and_cleans_up(
    nats_url: str, buses: list[NatsBus], js: JetStreamContext
) -> None:
    queue = fresh_queue(persistent=True)
    stream = stream_name(dotted(queue))
    listeners = [await (await open_bus(buses, nats_url)).subscribe(queue) for _ in range(2)]
    publisher = await open_bus(buses, nats_url)
    for i in range(5):
        await publisher.publish(queue, str(i).encode(), {"id": str(i)})
    for listener in listeners:
        got = []
        for _ in range(5):
            delivery = await next_delivery(listener, 10)
            got.append(delivery.body)
            await delivery.ack()
        assert got == [b"0", b"1", b"2", b"3", b"4"]
    assert len(await js.consumers_info(stream)) == 2
    for listener in listeners:
        await listener.close()
    assert await js.consumers_info(stream) == []


async def test_a_replica_process_killed_mid_call_is_covered_by_another(
    nats_url: str, buses: list[NatsBus], tmp_path: Path
) -> None:
    env = {
        "REPLICA_SERVICE_ID": f"replica-{uuid.uuid4().hex[:8]}",
        "REPLICA_REQUEST_QUEUE": fresh_queue(persistent=True, kind="request"),
        "REPLICA_RESPONSE_QUEUE": fresh_queue(kind="response"),
    }
    answers: list[str] = []
    answered = anyio.Event()
    async with (
        ToolServiceClient(await open_bus(buses, nats_url)) as client,
        anyio.create_task_group() as tasks,
    ):
        doomed_env = {**env, "REPLICA_MODE": "hang"}
        async with serve(["replica:service"], nats_url, workdir=tmp_path, env=doomed_env) as doomed:

            async def call() -> None:
                answers.append(
                    await client.call(
                        request_queue=env["REPLICA_REQUEST_QUEUE"],
                        response_queue=env["REPLICA_RESPONSE_QUEUE"],
                        timeout=60,
                    )
                )
                answered.set()

            tasks.start_soon(call)
            with anyio.fail_after(10):
                await doomed.wait_for("CALL STARTED")
            doomed.kill()  # mid-call: no answer, no ack, no nack
        survivor_env = {**env, "REPLICA_MODE": "answer", "REPLICA_NAME": "the survivor"}
        async with serve(["replica:service"], nats_url, workdir=tmp_path, env=survivor_env):
            with anyio.fail_after(30):
                await answered.wait()
    assert answers == ["answered by the survivor"]


async def test_a_stored_message_is_stored_once_and_readers_see_only_its_properties(
    nats_url: str, buses: list[NatsBus], js: JetStreamContext
) -> None:
    bus = await open_bus(buses, nats_url)
    queue = fresh_queue(persistent=True)
    subscription = await bus.subscribe(queue, group="readers")
    await bus.publish(queue, b"once", {"id": "call-1"})
    delivery = await next_delivery(subscription, 5)
    # The id that lets JetStream recognise a copy sent again is the adapter's own.
    assert dict(delivery.properties) == {"id": "call-1"}
    stored = await js.get_last_msg(stream_name(dotted(queue)), dotted(queue))
    assert stored.headers is not None and stored.headers.get("Nats-Msg-Id")
    # Sent again with the same id (as after a lost confirmation): stored once.
    ack = await js.publish(dotted(queue), b"once", headers=dict(stored.headers))
    assert ack.duplicate
    assert (await js.stream_info(stream_name(dotted(queue)))).state.messages == 1
    await delivery.ack()


@pytest.mark.parametrize("confirm_acks", [True, False])
async def test_an_ack_removes_the_message_with_or_without_confirmation(
    nats_url: str, buses: list[NatsBus], js: JetStreamContext, confirm_acks: bool
) -> None:
    bus = await open_bus(buses, nats_url, confirm_acks=confirm_acks)
    queue = fresh_queue(persistent=True)
    subscription = await bus.subscribe(queue, group="readers")
    await bus.publish(queue, b"done", {"id": "1"})
    await (await next_delivery(subscription, 5)).ack()
    stream = stream_name(dotted(queue))
    with anyio.fail_after(5):
        # Interest retention: the message goes once its only group acked it. The
        # server's stream state offers no event to wait on: ask until it is gone.
        while (await js.stream_info(stream)).state.messages:  # noqa: ASYNC110
            await anyio.sleep(0.02)
    await subscription.close()
