"""TrustGraph wire compatibility over Pulsar, proven with raw pulsar-client on the other side.

The raw side is written the way a TrustGraph component talks: JSON bodies made
with ``json.dumps``, the call id in the message property ``id``, and its own
subscription on the response queue. No toolbus code runs on that side.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pulsar
import pytest

from tests.pulsar.processes import child_environment, toolbus_command, wait_for_line
from toolbus.application.calls.client import ToolServiceClient
from toolbus.domain.errors import ToolServiceError
from toolbus_joke.service import tell_joke
from toolbus_pulsar import connect

pytestmark = [pytest.mark.anyio, pytest.mark.broker]

JOKE_REQUESTS = "non-persistent://tg/request/joke"
JOKE_RESPONSES = "non-persistent://tg/response/joke"


@pytest.fixture
def raw_client(pulsar_url: str) -> Iterator[pulsar.Client]:
    client = pulsar.Client(pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    try:
        yield client
    finally:
        client.close()


def trustgraph_request(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> bytes:
    """A request body exactly as TrustGraph's tool-service client writes it."""
    return json.dumps(
        {"user": user, "config": json.dumps(config), "arguments": json.dumps(arguments)}
    ).encode("utf-8")


def trustgraph_response(response: str, end_of_stream: bool, error: Any = None) -> bytes:
    """A response body exactly as a TrustGraph tool service writes it."""
    return json.dumps(
        {"error": error, "response": response, "end_of_stream": end_of_stream}
    ).encode("utf-8")


async def test_a_raw_trustgraph_request_gets_the_joke_service_s_answer(
    pulsar_url: str, raw_client: pulsar.Client, tmp_path: Path
) -> None:
    service = await anyio.open_process(
        [*toolbus_command(), "serve", "joke-service", "--broker", pulsar_url],
        cwd=tmp_path,
        env=child_environment(),
        stderr=subprocess.PIPE,
    )
    try:
        assert service.stderr is not None
        await wait_for_line(service.stderr, "serving joke-service", timeout=30)

        def ask() -> pulsar.Message:
            # The caller's own subscription first, so that the answer cannot be missed.
            responses = raw_client.subscribe(JOKE_RESPONSES, f"tg-agent-{uuid.uuid4().hex}")
            requests = raw_client.create_producer(JOKE_REQUESTS)
            call_id = str(uuid.uuid4())
            body = trustgraph_request("alice", {"style": "pun"}, {"topic": "programming"})
            requests.send(body, properties={"id": call_id})
            while True:
                message = responses.receive(timeout_millis=20_000)
                responses.acknowledge(message)
                if message.properties().get("id") == call_id:
                    return message

        message = await anyio.to_thread.run_sync(ask)
        answer = json.loads(message.data())
        assert answer == {
            "error": None,
            "response": tell_joke("alice", "programming", "pun"),
            "end_of_stream": True,
        }
        # Byte for byte what TrustGraph's own json.dumps would have written.
        assert message.data() == trustgraph_response(answer["response"], True)

        service.terminate()  # SIGTERM: drain and leave cleanly
        with anyio.fail_after(30):
            assert await service.wait() == 0
    finally:
        if service.returncode is None:
            service.kill()
        await service.aclose()


async def test_a_raw_trustgraph_style_service_answers_a_toolbus_client(
    pulsar_url: str, raw_client: pulsar.Client
) -> None:
    name = uuid.uuid4().hex[:8]
    request_queue = f"non-persistent://tg/request/{name}"
    response_queue = f"non-persistent://tg/response/{name}"
    received: list[tuple[bytes, dict[str, str]]] = []
    answers = raw_client.create_producer(response_queue)

    def serve(consumer: pulsar.Consumer, message: pulsar.Message) -> None:
        # A TrustGraph-style tool service: decode, answer under the same id, ack.
        properties = message.properties()
        received.append((message.data(), properties))
        request = json.loads(message.data())
        arguments = json.loads(request["arguments"])
        reply = {"id": properties["id"]}
        if arguments.get("fail"):
            error = {"type": "tool-service-error", "message": "no such joke"}
            answers.send(trustgraph_response("", True, error), properties=reply)
        else:
            chunks = ["Why do ", "programmers ", f"prefer dark mode, {request['user']}?"]
            for index, chunk in enumerate(chunks):
                last = index == len(chunks) - 1
                answers.send(trustgraph_response(chunk, last), properties=reply)
        consumer.acknowledge(message)

    await anyio.to_thread.run_sync(
        lambda: raw_client.subscribe(
            request_queue,
            "tg-style-service",
            consumer_type=pulsar.ConsumerType.Shared,
            message_listener=serve,
        )
    )
    bus = await connect(pulsar_url)
    try:
        async with ToolServiceClient(bus, default_timeout=20) as client:
            route: dict[str, Any] = {
                "request_queue": request_queue,
                "response_queue": response_queue,
                # This service reads requests as trustgraph-base 2.1 to 2.3 write them.
                "generation": "2.1",
            }
            chunks = [
                chunk
                async for chunk in client.stream(
                    **route, user="alice", config={"k": "v"}, arguments={"topic": "x"}
                )
            ]
            assert chunks == ["Why do ", "programmers ", "prefer dark mode, alice?"]
            joined = await client.call(**route, user="bob", arguments={"topic": "y"})
            assert joined == "Why do programmers prefer dark mode, bob?"
            with pytest.raises(ToolServiceError, match="no such joke"):
                await client.call(**route, arguments={"fail": True})
            assert client.pending == 0
    finally:
        await bus.close()

    body, properties = received[0]
    # The request toolbus sent is byte for byte what TrustGraph 2.1's client sends.
    assert body == trustgraph_request("alice", {"k": "v"}, {"topic": "x"})
    assert uuid.UUID(properties["id"])
