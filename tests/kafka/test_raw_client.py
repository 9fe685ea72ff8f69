"""A plain aiokafka client, written the way a TrustGraph component talks, calls the joke service.

The service runs as a deployment would run it (``toolbus serve joke-service
--broker kafka://...`` in its own process); the client knows nothing of toolbus:
it writes TrustGraph's request body with an ``id`` header to ``tg.request.joke``
and reads ``tg.response.joke`` for the answer carrying the same ``id``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

REQUEST_TOPIC = "tg.request.joke"
RESPONSE_TOPIC = "tg.response.joke"
PARTITIONS = 4


@pytest.fixture
async def joke_service(kafka_url: str) -> AsyncIterator[Process]:
    """``toolbus serve joke-service`` on the session's broker, until SIGTERM."""
    toolbus = Path(sys.executable).with_name("toolbus")
    process = await anyio.open_process(
        [str(toolbus), "serve", "joke-service", "--broker", kafka_url]
    )
    assert process.stderr is not None
    seen = ""
    with anyio.fail_after(60):
        async for text in TextReceiveStream(process.stderr):
            seen += text
            if "serving joke-service" in seen:
                break
        else:
            raise AssertionError(f"toolbus serve exited before serving:\n{seen}")
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(30):
            assert await process.wait() == 0, "toolbus serve did not drain and exit cleanly"


async def ensure_topics(bootstrap: str) -> None:
    """What a deployment does up front: both topics exist before anyone talks."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        # An error code for "already exists" is fine: the service may have made one.
        await admin.create_topics(
            [NewTopic(t, PARTITIONS, 1) for t in (REQUEST_TOPIC, RESPONSE_TOPIC)]
        )
    finally:
        await admin.close()


async def test_plain_aiokafka_gets_a_trustgraph_answer(
    kafka_address: str, joke_service: Process
) -> None:
    await ensure_topics(kafka_address)
    answers = AIOKafkaConsumer(bootstrap_servers=kafka_address, enable_auto_commit=False)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_address, enable_idempotence=False)
    await answers.start()
    await producer.start()
    try:
        partitions = [TopicPartition(RESPONSE_TOPIC, p) for p in range(PARTITIONS)]
        answers.assign(partitions)
        await answers.seek_to_end(*partitions)

        call_id = str(uuid.uuid4())
        body = json.dumps(
            {
                "user": "alice",
                "config": json.dumps({"style": "pun"}),
                "arguments": json.dumps({"topic": "llamas"}),
            }
        ).encode()
        await producer.send_and_wait(REQUEST_TOPIC, body, headers=[("id", call_id.encode())])

        async def answer_for(wanted: str) -> dict[str, object]:
            while True:
                record = await answers.getone()
                if dict(record.headers).get("id") == wanted.encode():
                    return json.loads(record.value)  # type: ignore[no-any-return]

        answer = await asyncio.wait_for(answer_for(call_id), 30)
    finally:
        await answers.stop()
        await producer.stop()

    assert answer["error"] is None
    assert answer["end_of_stream"] is True
    assert isinstance(answer["response"], str)
    assert answer["response"].startswith("Hey alice! Here's a pun for you:")
