"""A TrustGraph peer for the interoperability tests, run inside a trustgraph-base environment.

It imports nothing of toolbus: it is TrustGraph's own ``DynamicToolService`` or
``ToolServiceClient``, on TrustGraph's own pub/sub backend, as an application
using that release would set them up. Both generations are handled: 2.1 (the
service's ``invoke(user, config, arguments)``) and 2.4 and later
(``invoke(config, arguments)``); so are both kinds of pub/sub backend: the
threaded ones up to 2.7 (a client built on ``RequestResponse``) and the asyncio
ones from 2.8 (a client made by ``ToolServiceClientSpec`` on a
``RequestResponseClient``).

    python peer.py serve --broker pulsar://127.0.0.1:6650 --topic echo
    python peer.py call --broker kafka://127.0.0.1:9092 --request-queue request:tg:echo \
        --response-queue response:tg:echo \
        --calls '[{"arguments": {"text": "hi"}, "config": {}, "user": "alice", "stream": false}]'
    python peer.py encode
    python peer.py declare --broker amqp://127.0.0.1:5672 --topics request:tg:echo \
        --subscription echo-svc

``serve`` prints ``ready`` once it consumes requests; its service echoes what
it received as JSON (the user too, on 2.1), fails when the arguments hold
``fail``, and with ``--queue-ids`` streams the chunks listed in ``stream``, each
a response of its own sent by TrustGraph's producer, as its streaming services
answer. ``call`` makes the calls in turn and prints, for each, one JSON line
per chunk it is handed (``{"chunk": ...}``), then ``{"result": ...}`` or
``{"error": ...}``. ``encode`` prints the bodies this release's producers write
for the requests and responses read as JSON lines from stdin. ``declare`` makes
TrustGraph's RabbitMQ consumers for the topics and prints, for each, the
exchange and queue its backend declared (then closes them).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import os
import sys
import uuid
from importlib.metadata import version
from importlib.util import find_spec
from typing import Any
from urllib.parse import urlsplit

from trustgraph.base.dynamic_tool_service import DynamicToolService
from trustgraph.schema import ToolServiceRequest, ToolServiceResponse

NEW_GENERATION = tuple(int(part) for part in version("trustgraph-base").split(".")[:2]) >= (2, 4)
#: The asyncio pub/sub backends (2.8 and later) rather than the threaded ones.
ASYNC_BACKENDS = find_spec("trustgraph.base.async_backend") is not None


def backend_settings(broker: str) -> dict[str, Any]:
    """TrustGraph's own processor settings for a ``pulsar://``, ``kafka://`` or ``amqp://``
    address."""
    if broker.startswith("kafka://"):
        return {
            "pubsub_backend": "kafka",
            "kafka_bootstrap_servers": broker.removeprefix("kafka://"),
        }
    if broker.startswith("amqp://"):
        address = urlsplit(broker)
        return {
            "pubsub_backend": "rabbitmq",
            "rabbitmq_host": address.hostname,
            "rabbitmq_port": address.port,
            "rabbitmq_username": "guest",
            "rabbitmq_password": "guest",
            "rabbitmq_vhost": "/",
        }
    return {"pubsub_backend": "pulsar", "pulsar_host": broker, "pulsar_api_key": None}


def echo(user: str | None, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
    if "fail" in arguments:
        raise RuntimeError(arguments["fail"])
    received: dict[str, Any] = {"config": config, "arguments": arguments}
    if user is not None:
        received["user"] = user
    return received


if NEW_GENERATION:

    class EchoService(DynamicToolService):
        async def invoke(self, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
            return echo(None, config, arguments)

else:

    class EchoService(DynamicToolService):  # type: ignore[no-redef]
        async def invoke(self, user: str, config: dict[str, Any], arguments: dict[str, Any]) -> Any:
            return echo(user, config, arguments)

        async def fetch_and_apply_config(self) -> None:
            """Nothing to fetch: no config service runs beside these tests, and the echo
            service needs no configuration. (2.3's ``start()`` would otherwise ask for
            it until a config service answers.)"""


class QueueNamedService(EchoService):
    """The stock service, consuming and producing on queues given in TrustGraph's form.

    ``DynamicToolService`` of 2.4+ hard-codes ``non-persistent://tg/...``, which
    TrustGraph's own Kafka and RabbitMQ backends refuse ("Invalid topic
    format"): this registers the same handler on ``request:tg:{topic}`` /
    ``response:tg:{topic}`` instead, through the same pools (2.8 and later) or
    the same ``Consumer`` and ``Producer`` classes (before).
    """

    def __init__(self, **params: Any) -> None:
        super().__init__(**params)
        if ASYNC_BACKENDS:
            return
        from trustgraph.base.consumer import Consumer
        from trustgraph.base.producer import Producer

        topic = params["topic"]
        self.consumer = Consumer(
            taskgroup=self.taskgroup,
            backend=self.pubsub,
            subscriber=f"{self.id}-request",
            flow=None,
            topic=f"request:tg:{topic}",
            schema=ToolServiceRequest,
            handler=self.on_request,
        )
        self.producer = Producer(
            backend=self.pubsub, topic=f"response:tg:{topic}", schema=ToolServiceResponse
        )

    async def on_request(self, msg: Any, consumer: Any, flow: Any) -> None:
        request = msg.value()
        chunks = json.loads(request.arguments or "{}").get("stream")
        if not chunks:
            await super().on_request(msg, consumer, flow)
            return
        reply = {"id": msg.properties().get("id", "unknown")}
        send = self._producer_handle.send if ASYNC_BACKENDS else self.producer.send
        for chunk in chunks:
            await send(ToolServiceResponse(error=None, response=chunk, end_of_stream=False), reply)
        await send(ToolServiceResponse(error=None, response="", end_of_stream=True), reply)

    async def start(self) -> None:
        if not ASYNC_BACKENDS:
            await super().start()
            return
        await super(DynamicToolService, self).start()
        self._producer_handle = await self.sender_pool.add_producer(
            topic=f"response:tg:{self._topic}", schema=ToolServiceResponse
        )

        async def handler(message: Any) -> None:
            await self.on_request(message, None, None)

        self._consumer_reg = await self.receiver_pool.add_consumer(
            topic=f"request:tg:{self._topic}",
            subscription=f"{self.id}-request",
            schema=ToolServiceRequest,
            handler=handler,
        )


async def serve(options: argparse.Namespace) -> None:
    service_class = QueueNamedService if options.queue_ids else EchoService
    params = {
        "id": options.id,
        "topic": options.topic,
        "config_timeout": 5,
        **backend_settings(options.broker),
    }
    async with asyncio.TaskGroup() as group:
        service = service_class(**params, taskgroup=group)
        await service.start()
        print(MARK + "ready", flush=True)
        await asyncio.Event().wait()


async def open_client(options: argparse.Namespace) -> tuple[Any, Any]:
    """TrustGraph's client for the queues, as its agent makes one; and how to close it."""
    settings = backend_settings(options.broker)
    if ASYNC_BACKENDS:
        from trustgraph.base.pubsub import get_async_pubsub
        from trustgraph.base.tool_service_client import ToolServiceClientSpec

        backend = get_async_pubsub(**settings)

        class Processor:
            id = "tg-agent"
            async_backend = backend

        class Flow:
            def __init__(self) -> None:
                self.consumer: dict[str, Any] = {}

        spec = ToolServiceClientSpec("tool-request", "tool-response")
        definition = {
            "topics": {
                "tool-request": options.request_queue,
                "tool-response": options.response_queue,
            }
        }
        client = await spec.register(Flow(), Processor(), definition)

        async def close() -> None:
            await client.stop()
            await backend.close()

        return client, close

    from trustgraph.base.pubsub import get_pubsub
    from trustgraph.base.tool_service_client import ToolServiceClient

    backend = get_pubsub(**settings)
    client = ToolServiceClient(
        backend=backend,
        subscription=f"tg-agent--{uuid.uuid4()}",
        consumer_name="tg-agent",
        request_topic=options.request_queue,
        request_schema=ToolServiceRequest,
        request_metrics=None,
        response_topic=options.response_queue,
        response_schema=ToolServiceResponse,
        response_metrics=None,
    )
    await client.start()

    async def close() -> None:
        await client.stop()
        backend.close()

    return client, close


#: Marks this script's own lines: the Pulsar client library logs to stdout too.
MARK = "peer> "


def say(**line: Any) -> None:
    print(MARK + json.dumps(line), flush=True)


async def call(options: argparse.Namespace) -> None:
    client, close = await open_client(options)
    try:
        for request in json.loads(options.calls):
            await call_once(client, request, options.timeout)
    finally:
        await close()


async def call_once(client: Any, request: dict[str, Any], timeout: float) -> None:
    config, arguments = request.get("config", {}), request.get("arguments", {})
    who = () if NEW_GENERATION else (request.get("user", ""),)
    try:
        if request.get("stream"):

            async def chunk(text: str) -> None:
                say(chunk=text)

            result = await client.call_streaming(*who, config, arguments, chunk, timeout=timeout)
        else:
            result = await client.call(*who, config, arguments, timeout=timeout)
    except Exception as exc:
        say(error=str(exc))
    else:
        say(result=result)


class Capture:
    """Stands in for the broker client under a producer: keeps the bodies TrustGraph's
    producers hand it (pulsar-client's producer, aiokafka's, a pika channel)."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    def send(self, body: bytes, properties: dict[str, str] | None = None) -> None:
        self.bodies.append(body)

    async def send_and_wait(self, topic: str, value: bytes, headers: Any = None) -> None:
        self.bodies.append(value)

    def basic_publish(self, exchange: str, routing_key: str, body: bytes, properties: Any) -> None:
        self.bodies.append(body)


class AsyncCapture(Capture):
    """The same for the asyncio producers (and an aio-pika exchange)."""

    async def send(  # type: ignore[override]
        self, body: bytes, properties: dict[str, str] | None = None
    ) -> None:
        self.bodies.append(body)

    async def publish(self, message: Any, routing_key: str) -> None:
        self.bodies.append(message.body)


def producers(capture: Capture) -> list[Any]:
    """Every producer this release has, each writing into ``capture``."""
    if ASYNC_BACKENDS:
        from trustgraph.base.async_kafka_backend import AsyncKafkaProducer
        from trustgraph.base.async_pulsar_backend import AsyncPulsarProducer
        from trustgraph.base.async_rabbitmq_backend import AsyncRabbitMQProducer

        return [
            AsyncPulsarProducer(capture, None),
            AsyncKafkaProducer(capture, "topic"),
            AsyncRabbitMQProducer(None, capture, False),
        ]
    from trustgraph.base.pulsar_backend import PulsarBackendProducer

    made: list[Any] = [PulsarBackendProducer(capture, None)]
    if find_spec("trustgraph.base.rabbitmq_backend") is not None:
        from trustgraph.base.rabbitmq_backend import RabbitMQBackendProducer

        rabbitmq = RabbitMQBackendProducer(None, "exchange", False)
        rabbitmq._get_channel = lambda: capture  # its pika channel
        made.append(rabbitmq)
    return made


async def encode() -> None:
    """Each stdin line's message, as every producer of this release writes it (base64)."""
    from trustgraph.schema import Error

    make_capture = AsyncCapture if ASYNC_BACKENDS else Capture
    for line in sys.stdin:
        fields = json.loads(line)
        if "error" in fields:
            error = fields["error"]
            fields["error"] = None if error is None else Error(**error)
            message: Any = ToolServiceResponse(**fields)
        else:
            fields = {k: v for k, v in fields.items() if k != "user" or not NEW_GENERATION}
            message = ToolServiceRequest(**fields)
        capture = make_capture()
        made = producers(capture)
        for producer in made:
            sent = producer.send(message, {"id": "x"})
            if asyncio.iscoroutine(sent):
                await sent
        assert len(capture.bodies) == len(made) and len(set(capture.bodies)) == 1, capture.bodies
        say(body=base64.b64encode(capture.bodies[0]).decode())


async def declare(options: argparse.Namespace) -> None:
    """TrustGraph's RabbitMQ consumers for the topics: what its backend declared for each."""
    settings = backend_settings(options.broker)
    if ASYNC_BACKENDS:
        from trustgraph.base.pubsub import get_async_pubsub

        backend = get_async_pubsub(**settings)
        for topic in options.topics:
            consumer = await backend.create_consumer(
                topic, options.subscription, ToolServiceRequest
            )
            exchange = backend._parse_topic(topic)[0]
            queue = consumer._queue
            say(topic=topic, exchange=exchange, queue=queue.name, durable=queue.durable,
                exclusive=queue.exclusive, auto_delete=queue.auto_delete)  # fmt: skip
            await consumer.close()
        await backend.close()
        return
    from trustgraph.base.pubsub import get_pubsub

    backend = get_pubsub(**settings)
    for topic in options.topics:
        consumer = backend.create_consumer(topic, options.subscription, ToolServiceRequest)
        consumer.ensure_connected()
        say(topic=topic, exchange=consumer._exchange_name, queue=consumer._queue_name,
            durable=consumer._durable, exclusive=consumer._exclusive,
            auto_delete=consumer._auto_delete)  # fmt: skip
        consumer.close()
    backend.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="peer")
    commands = parser.add_subparsers(dest="command", required=True)
    server = commands.add_parser("serve")
    server.add_argument("--broker", required=True)
    server.add_argument("--topic", required=True)
    server.add_argument("--id", default="tg-echo")
    server.add_argument("--queue-ids", action="store_true")
    caller = commands.add_parser("call")
    caller.add_argument("--broker", required=True)
    caller.add_argument("--request-queue", required=True)
    caller.add_argument("--response-queue", required=True)
    caller.add_argument("--calls", required=True, help="JSON list of calls, made in turn")
    caller.add_argument("--timeout", type=float, default=30)
    commands.add_parser("encode")
    declarer = commands.add_parser("declare")
    declarer.add_argument("--broker", required=True)
    declarer.add_argument("--topics", nargs="+", required=True)
    declarer.add_argument("--subscription", required=True)
    options = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    run = {"serve": serve, "call": call, "encode": lambda _: encode(), "declare": declare}[
        options.command
    ]
    asyncio.run(run(options))
    sys.stdout.flush()
    # Skip the interpreter's teardown: pulsar-client's asyncio client sometimes
    # crashes there (SIGSEGV / abort) after everything has been closed.
    os._exit(0)


if __name__ == "__main__":
    main()
