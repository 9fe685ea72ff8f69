"""toolbus and real TrustGraph releases, both ways, on every broker they share.

The TrustGraph side is trustgraph-base itself (2.1.28, the first release with
tool services; 2.3.21, the last to write the 2.1 request; 2.4.0, the first to
write the 2.4 one; and 2.11.1, the newest 2.x), run in environments of its own
by ``peer.py``: its ``DynamicToolService`` serving toolbus clients, its
``ToolServiceClient`` calling toolbus services. TrustGraph 2.1 has only a Pulsar
backend; Kafka arrived in 2.3.15, RabbitMQ as toolbus maps it in 2.3.14.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.pulsar.processes import child_environment, toolbus_command, wait_for_line
from tests.trustgraph.environments import PEER, VERSIONS, generation, trustgraph_python
from toolbus import Elicitation, ToolServiceClient, ask, connect, running, tool_service
from toolbus.application.calls.service import default_queues
from toolbus.domain.calls import wire
from toolbus.domain.calls.queues import parse_queue
from toolbus.domain.errors import ToolServiceError, ToolTimeout
from toolbus.ports import Bus
from toolbus.testing.conformance import next_delivery
from toolbus_rabbitmq.naming import exchange_for, group_queue

pytestmark = [pytest.mark.anyio, pytest.mark.broker, pytest.mark.slow]

#: What the peer prints before each line of its own.
MARK = "peer> "
#: (release, broker) pairs that interoperate: 2.1 has no Kafka or RabbitMQ backend.
CASES = [
    ("2.1.28", "pulsar"),
    ("2.11.1", "pulsar"),
    ("2.3.21", "kafka"),
    ("2.11.1", "kafka"),
    ("2.3.21", "rabbitmq"),
    ("2.4.0", "rabbitmq"),
    ("2.11.1", "rabbitmq"),
]
CASE_IDS = [f"{version}-{broker}" for version, broker in CASES]


@pytest.fixture(params=VERSIONS)
def release(request: pytest.FixtureRequest) -> str:
    return str(request.param)


async def peer_python(version: str) -> str:
    # Built once per machine and release (the first run downloads it).
    return str(await anyio.to_thread.run_sync(trustgraph_python, version))


def queues(broker: str, name: str) -> tuple[str, str]:
    """The queues both sides are told: TrustGraph's own spelling where its backend needs it.

    TrustGraph's Kafka and RabbitMQ backends read only ``class:topicspace:topic``;
    toolbus maps that and ``non-persistent://tg/...`` onto the same Kafka topic
    and the same RabbitMQ exchange.
    """
    if broker in ("kafka", "rabbitmq"):
        return f"request:tg:{name}", f"response:tg:{name}"
    return f"non-persistent://tg/request/{name}", f"non-persistent://tg/response/{name}"


async def trustgraph_calls(
    version: str, broker: str, request_queue: str, response_queue: str, calls: list[Any]
) -> list[list[dict[str, Any]]]:
    """Make ``calls`` with TrustGraph's ToolServiceClient; per call, the lines it printed."""
    command = [await peer_python(version), str(PEER), "call", "--broker", broker]
    command += ["--request-queue", request_queue, "--response-queue", response_queue]
    command += ["--calls", json.dumps(calls), "--timeout", "30"]
    with anyio.fail_after(90):
        finished = await anyio.run_process(command, check=False)
    assert finished.returncode == 0, finished.stderr.decode(errors="replace")
    answers: list[list[dict[str, Any]]] = [[]]
    for line in finished.stdout.decode().splitlines():
        if not line.startswith(MARK):
            continue
        answers[-1].append(json.loads(line.removeprefix(MARK)))
        if "chunk" not in answers[-1][-1]:
            answers.append([])
    return answers[:-1]


@asynccontextmanager
async def trustgraph_service(
    version: str, broker: str, topic: str, *, queue_ids: bool
) -> AsyncIterator[None]:
    """TrustGraph's DynamicToolService, consuming once this is entered."""
    command = [await peer_python(version), str(PEER), "serve", "--broker", broker]
    command += ["--topic", topic, "--id", f"tg-{topic}"] + (["--queue-ids"] if queue_ids else [])
    process = await anyio.open_process(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert process.stdout is not None and process.stderr is not None
        seen = b""
        with anyio.fail_after(60):
            while f"{MARK}ready".encode() not in seen:
                try:
                    seen += await process.stdout.receive()
                except anyio.EndOfStream:
                    errors = await process.stderr.receive()
                    raise AssertionError(f"TrustGraph's service ended: {errors!r}") from None
        yield
    finally:
        process.terminate()
        await process.aclose()


def echo_service(name: str, *, join_stream: bool = False) -> Any:
    """A toolbus service that streams what it got (or the given chunks); fails on request.

    Its queues are spelled toolbus's way whatever TrustGraph's side is told: on
    Kafka, ``non-persistent://tg/request/x`` and ``request:tg:x`` are one topic.
    """
    # TrustGraph's default topics for a service: non-persistent://tg/{request,response}/NAME.
    request_queue, response_queue = default_queues(name)

    @tool_service(
        f"echo-{name}",
        request_queue=request_queue,
        response_queue=response_queue,
        config_params=["collection", "join-stream"],
        join_stream=join_stream,
    )
    async def echo(
        user: str, config: dict[str, Any], arguments: dict[str, Any]
    ) -> AsyncIterator[str]:
        if "fail" in arguments:
            raise ToolServiceError(arguments["fail"])
        if "ask" in arguments:  # a tool that asks its caller: TrustGraph's cannot answer
            await ask(Elicitation(arguments["ask"]))
        for chunk in arguments.get("chunks") or [json.dumps([user, config, arguments])]:
            yield chunk

    return echo


async def made_as_a_deployment_makes_them(bus: Bus, queue: str) -> None:
    """Make ``queue``'s topic now, as TrustGraph's flow service makes a deployment's topics.

    The threaded Kafka client of TrustGraph 2.3 to 2.7 (librdkafka) that subscribes
    to a topic nobody has made yet may wait for its next metadata refresh
    (minutes) before it reads anything; a real deployment has its topics. A
    subscription made and closed here makes it (on the other brokers it does no
    harm).
    """
    subscription = await bus.subscribe(queue)
    await subscription.close()


@pytest.mark.parametrize(("version", "broker_name"), CASES, ids=CASE_IDS)
async def test_trustgraph_s_client_calls_a_toolbus_service(
    version: str, broker_name: str, broker_addresses: Callable[[str], tuple[str, str]]
) -> None:
    url, address = broker_addresses(broker_name)
    name = uuid.uuid4().hex[:8]
    plain, joined = (
        echo_service(name),
        echo_service(f"{name}j", join_stream=True),
    )
    chunks = {"chunks": ["Why ", "so ", "serious?"]}
    bus = await connect(url)
    try:
        async with running(bus, plain, joined):
            for service in (plain, joined):
                await made_as_a_deployment_makes_them(bus, service.response_queue)
            answers = await trustgraph_calls(
                version,
                address,
                *queues(broker_name, name),
                [
                    {"user": "alice", "config": {"collection": "c1"}, "arguments": {"q": "é"}},
                    {"arguments": {"fail": "no such joke"}},
                    {"arguments": chunks, "stream": True},
                    # The trap: TrustGraph's call() keeps the first response it sees.
                    {"arguments": chunks},
                    # Joined for this tool: its descriptor sets the service's join-stream.
                    {"arguments": chunks, "config": {"join-stream": True}},
                    # A tool that asks: TrustGraph reads the answer as the error it is.
                    {"arguments": {"ask": "Sure?"}},
                ],
            )
            joined_answers = await trustgraph_calls(
                version, address, *queues(broker_name, f"{name}j"), [{"arguments": chunks}]
            )
    finally:
        await bus.close()

    # 2.1 sends the user in the body; 2.4 and later send none.
    user = "alice" if generation(version) == "2.1" else ""
    assert answers[0] == [{"result": json.dumps([user, {"collection": "c1"}, {"q": "é"}])}]
    assert answers[1] == [{"error": "no such joke"}]
    assert answers[2] == [
        {"chunk": "Why "},
        {"chunk": "so "},
        {"chunk": "serious?"},
        {"result": "Why so serious?"},
    ]
    assert answers[3] == [{"result": "Why "}]
    assert answers[4] == [{"result": "Why so serious?"}]
    [asked] = answers[5]
    assert asked["error"].startswith('this tool asks its caller for elicitation "Sure?"')
    assert joined_answers == [[{"result": "Why so serious?"}]]


async def call_until_served(client: ToolServiceClient, **call: Any) -> str:
    """The first call, repeated while the service's request consumer is still starting.

    TrustGraph's request consumers start at the latest offset once their Kafka
    group is assigned, and bind their RabbitMQ queue once their thread or task
    runs, neither of which its ``start()`` waits for: a request sent before then
    is never seen. Bounded: five tries.
    """
    for _ in range(4):
        try:
            return await client.call(**call, timeout=5)
        except ToolTimeout:
            continue
    return await client.call(**call, timeout=5)


@pytest.mark.parametrize(("version", "broker_name"), CASES, ids=CASE_IDS)
async def test_a_toolbus_client_calls_trustgraph_s_service(
    version: str, broker_name: str, broker_addresses: Callable[[str], tuple[str, str]]
) -> None:
    url, address = broker_addresses(broker_name)
    topic = uuid.uuid4().hex[:8]
    # DynamicToolService listens on non-persistent://tg/{request,response}/{topic}; on
    # Kafka and RabbitMQ (whose backends refuse that spelling) on request:tg:{topic},
    # the same topic (exchange) for toolbus.
    route: dict[str, Any] = {
        "request_queue": f"non-persistent://tg/request/{topic}",
        "response_queue": f"non-persistent://tg/response/{topic}",
        "generation": generation(version),
    }
    bus: Bus = await connect(url)
    try:
        async with (
            trustgraph_service(
                version, address, topic, queue_ids=broker_name in ("kafka", "rabbitmq")
            ),
            ToolServiceClient(bus, default_timeout=20) as client,
        ):
            answer = await call_until_served(
                client, **route, user="alice", config={"collection": "c1"}, arguments={"q": "ü"}
            )
            streamed = [chunk async for chunk in client.stream(**route, arguments={"q": 1})]
            with pytest.raises(ToolServiceError, match="no such joke") as failed:
                await client.call(**route, arguments={"fail": "no such joke"})
    finally:
        await bus.close()

    expected: dict[str, Any] = {"config": {"collection": "c1"}, "arguments": {"q": "ü"}}
    if generation(version) == "2.1":
        expected["user"] = "alice"
    assert json.loads(answer) == expected
    # 2.1's service reads an empty user as "trustgraph".
    assert [json.loads(chunk) for chunk in streamed] == [
        {"config": {}, "arguments": {"q": 1}}
        | ({"user": "trustgraph"} if "user" in expected else {})
    ]
    assert failed.value.error_type == "tool-service-error"


#: Releases whose RabbitMQ producer sends each message from a thread of a pool,
#: on that thread's own connection (the threaded backends, before 2.8).
THREADED_RABBITMQ_PRODUCERS = {("2.3.21", "rabbitmq"), ("2.4.0", "rabbitmq")}
#: (release, broker) pairs where TrustGraph's service is served on its own queue ids.
QUEUE_ID_CASES = [case for case in CASES if case[1] in ("kafka", "rabbitmq")]


@pytest.mark.parametrize(
    ("version", "broker_name"), QUEUE_ID_CASES, ids=[f"{v}-{b}" for v, b in QUEUE_ID_CASES]
)
async def test_a_trustgraph_service_s_stream_reaches_a_toolbus_client_whole_and_in_order(
    version: str, broker_name: str, broker_addresses: Callable[[str], tuple[str, str]]
) -> None:
    # TrustGraph's producers send without a key, each chunk to any partition of a
    # Kafka topic; the toolbus client makes the response topic (it subscribes before
    # its first request), with one partition, so no chunk can overtake another.
    url, address = broker_addresses(broker_name)
    topic = uuid.uuid4().hex[:8]
    route: dict[str, Any] = {
        "request_queue": f"non-persistent://tg/request/{topic}",
        "response_queue": f"non-persistent://tg/response/{topic}",
    }
    streams = [[f"<{call}.{n}>" for n in range(12)] for call in range(5)]
    bus: Bus = await connect(url)
    try:
        async with (
            trustgraph_service(version, address, topic, queue_ids=True),
            ToolServiceClient(bus, default_timeout=20) as client,
        ):
            await call_until_served(client, **route, arguments={"q": 1})
            received = [
                [chunk async for chunk in client.stream(**route, arguments={"stream": chunks})]
                for chunks in streams
            ]
            late = client._listeners[route["response_queue"]].late_chunks
    finally:
        await bus.close()

    if (version, broker_name) in THREADED_RABBITMQ_PRODUCERS:
        # Each send of these releases may go out on another thread's connection, and
        # RabbitMQ keeps order per connection only: chunks can overtake each other and
        # the end of the stream. What came before the end is each call's own; what
        # came after it is reported as it arrives (some may be on their way still).
        missing = sum(map(len, streams)) - sum(map(len, received))
        assert late <= missing
        for got, chunks in zip(received, streams, strict=True):
            assert set(got) <= set(chunks) and len(set(got)) == len(got)
    else:
        assert received == streams
        assert late == 0


def encoded_by_trustgraph(python: str, messages: list[dict[str, Any]]) -> list[bytes]:
    lines = "".join(json.dumps(message) + "\n" for message in messages)
    finished = subprocess.run(
        [python, str(PEER), "encode"], input=lines, capture_output=True, text=True, check=True
    )
    lines = [line.removeprefix(MARK) for line in finished.stdout.splitlines()]
    return [base64.b64decode(json.loads(line)["body"]) for line in lines]


async def test_toolbus_writes_the_bytes_trustgraph_s_producers_write(release: str) -> None:
    python = await peer_python(release)
    config, arguments = {"collection": "Zürich"}, {"q": "日本", "n": [1, 2.5, None]}
    error = {"type": "tool-service-error", "message": "nö"}
    theirs = encoded_by_trustgraph(
        python,
        [
            {"user": "zoë", "config": json.dumps(config), "arguments": json.dumps(arguments)},
            {"user": "", "config": "{}", "arguments": "{}"},
            {"error": None, "response": "chunk ü", "end_of_stream": False},
            {"error": None, "response": "", "end_of_stream": True},
            {"error": error, "response": "", "end_of_stream": True},
        ],
    )
    ours = [
        wire.encode_request("zoë", config, arguments, generation(release)),
        wire.encode_request("", None, None, generation(release)),
        wire.encode_response("chunk ü", end_of_stream=False),
        wire.encode_response(""),
        wire.encode_error("tool-service-error", "nö"),
    ]
    assert ours == theirs


TRUSTGRAPH_TOPICS = [
    "request:tg:echo",
    "flow:tg:jobs",
    "response:tg:echo",
    "notify:tg:config",
    "request:tg:tool:ws1",
]


@pytest.mark.parametrize("version", ["2.3.21", "2.4.0", "2.11.1"])
async def test_toolbus_declares_on_rabbitmq_what_trustgraph_s_backend_declares(
    version: str, broker_addresses: Callable[[str], tuple[str, str]]
) -> None:
    url, address = broker_addresses("rabbitmq")
    subscription = f"svc-{uuid.uuid4().hex[:8]}"
    topics = [topic.replace("echo", f"echo-{subscription}") for topic in TRUSTGRAPH_TOPICS]
    command = [await peer_python(version), str(PEER), "declare", "--broker", address]
    command += ["--topics", *topics, "--subscription", subscription]
    with anyio.fail_after(60):
        finished = await anyio.run_process(command, check=False)
    assert finished.returncode == 0, finished.stderr.decode(errors="replace")[-3000:]
    declared = [
        json.loads(line.removeprefix(MARK))
        for line in finished.stdout.decode().splitlines()
        if line.startswith(MARK)
    ]
    assert [entry["topic"] for entry in declared] == topics

    bus = await connect(url)
    try:
        for entry in declared:
            queue = parse_queue(entry["topic"])
            exchange = exchange_for(queue)
            assert entry["exchange"] == exchange
            if entry["exclusive"]:
                # response and notify: a queue per subscriber, as toolbus's fan-out.
                assert (entry["durable"], entry["auto_delete"]) == (False, True)
                assert not queue.persistent
                continue
            # request and flow: one queue per subscription, named as toolbus names a
            # group's, made with the same settings: toolbus joins it (RabbitMQ would
            # refuse a declaration that differs) and shares its messages.
            assert entry["queue"] == group_queue(exchange, subscription)
            assert (entry["durable"], entry["auto_delete"]) == (queue.persistent, False)
            member = await bus.subscribe(entry["topic"], group=subscription)
            await bus.publish(entry["topic"], b"shared", {"id": "1"})
            delivery = await next_delivery(member, 10)
            assert delivery.body == b"shared"
            await delivery.ack()
            await member.close()
    finally:
        await bus.close()


def test_the_pinned_releases_are_the_ones_named() -> None:
    # Each pinned file holds exactly its release: a regenerated pin cannot drift.
    for version in VERSIONS:
        pins = (PEER.parent / f"requirements-{version}.txt").read_text()
        assert f"trustgraph-base=={version} " in pins


@pytest.mark.parametrize("broker_name", ["kafka", "rabbitmq"])
async def test_trustgraph_s_stock_service_cannot_start_on_its_own_kafka_or_rabbitmq_backend(
    broker_name: str, broker_addresses: Callable[[str], tuple[str, str]]
) -> None:
    # DynamicToolService.start() of 2.11.1 names its queues non-persistent://tg/...,
    # which TrustGraph's Kafka and RabbitMQ backends refuse; the tests above serve it
    # on request:tg:{topic} instead. When this fails, TrustGraph has fixed it.
    _, address = broker_addresses(broker_name)
    command = [await peer_python("2.11.1"), str(PEER), "serve", "--broker", address]
    command += ["--topic", uuid.uuid4().hex[:8]]
    with anyio.fail_after(60):
        finished = await anyio.run_process(command, check=False)
    assert "Invalid topic format: non-persistent://tg/" in finished.stderr.decode(), (
        finished.stderr.decode()[-3000:]
    )


async def test_toolbus_serve_join_stream_answers_trustgraph_s_call_whole(
    brokers: dict[str, tuple[str, str]], tmp_path: Path
) -> None:
    url, address = brokers["pulsar"]
    name = uuid.uuid4().hex[:8]
    (tmp_path / "chunky.py").write_text(
        "from toolbus import tool_service\n\n\n"
        f"@tool_service({name!r})\n"
        "async def chunky(text: str):\n"
        "    for word in text.split():\n"
        "        yield word + ' '\n",
        encoding="utf-8",
    )
    command = [*toolbus_command(), "serve", "chunky:chunky", "--broker", url, "--join-stream"]
    env = child_environment()
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env["PYTHONPATH"]])
    service = await anyio.open_process(command, cwd=tmp_path, env=env, stderr=subprocess.PIPE)
    try:
        assert service.stderr is not None
        await wait_for_line(service.stderr, f"serving {name}", timeout=30)
        answers = await trustgraph_calls(
            "2.11.1",
            address,
            *queues("pulsar", name),
            [{"arguments": {"text": "one two three"}}],
        )
    finally:
        service.terminate()
        await service.aclose()

    assert answers == [[{"result": "one two three "}]]
