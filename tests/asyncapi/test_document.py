"""The AsyncAPI document of a deployment: valid AsyncAPI 3.0, and true to the wire."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.asyncapi.support import schema_problems
from tests.session.support import workflow_snapshot
from toolbus.application.live.config_files import load_registry_from_path
from toolbus.domain.asyncapi.brokers import AsyncApiBroker, PlainBroker
from toolbus.domain.asyncapi.document import asyncapi_document
from toolbus.domain.calls import wire
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.config.schemas import json_schema
from toolbus.domain.errors import PluginError
from toolbus.plugins import asyncapi_broker
from toolbus_kafka.asyncapi import KafkaAsyncApi
from toolbus_nats.asyncapi import NatsAsyncApi
from toolbus_pulsar.asyncapi import PulsarAsyncApi
from toolbus_rabbitmq.asyncapi import RabbitMQAsyncApi

BROKERS: dict[str, AsyncApiBroker | None] = {
    "none": None,
    "memory": PlainBroker("memory://demo"),
    "nats": NatsAsyncApi("nats://ann:s3cret-pw@nats.example:4222"),
    "kafka": KafkaAsyncApi("kafka://k1.example:9092,k2.example:9092"),
    "pulsar": PulsarAsyncApi("pulsar://pulsar.example:6650"),
    "rabbitmq": RabbitMQAsyncApi("amqps://ann:s3cret-pw@r1.example,r2.example/production"),
}

WORKFLOW = Path(__file__).resolve().parents[1] / "data" / "workflow.json"


def workflow() -> Registry:
    """The five tools of the workflow example, on queues of both kinds."""
    return load_registry_from_path(WORKFLOW)


def node_path(ref: str) -> list[str]:
    assert ref.startswith("#/"), ref
    return [p.replace("~1", "/").replace("~0", "~") for p in ref[2:].split("/")]


def follow(document: dict[str, Any], node: Any) -> Any:
    """``node``, or what its local ``$ref`` points at."""
    while isinstance(node, dict) and "$ref" in node:
        target: Any = document
        for part in node_path(node["$ref"]):
            target = target[part]
        node = target
    return node


@pytest.mark.parametrize("broker", list(BROKERS), ids=str)
def test_the_document_is_valid_asyncapi_3(broker: str) -> None:
    document = asyncapi_document(workflow(), BROKERS[broker], version="1.2.3")

    assert schema_problems(document) == []
    assert document["asyncapi"] == "3.0.0"
    assert ("servers" in document) is (BROKERS[broker] is not None)


def test_one_channel_per_queue_and_one_operation_per_tool() -> None:
    registry = workflow()
    document = asyncapi_document(registry, BROKERS["nats"])

    queues = {q for s in registry.services.values() for q in (s.request_queue, s.response_queue)}
    assert sorted(c["title"] for c in document["channels"].values()) == sorted(queues)
    addresses = {c["title"]: c["address"] for c in document["channels"].values()}
    assert addresses["non-persistent://tg/request/knowledge"] == "tg.request.knowledge"
    operations = document["operations"]
    assert sorted(operations) == sorted(registry.tools)
    for key, tool in registry.tools.items():
        operation = operations[key]
        assert operation["action"] == "receive"
        assert operation["title"] == tool.name
        assert [tag["name"] for tag in operation["tags"]] == list(tool.groups)
        assert operation["bindings"] == {"nats": {"queue": tool.service, "bindingVersion": "0.1.0"}}
        channel = follow(document, operation["channel"])
        assert channel["title"] == registry.services[str(tool.service)].request_queue
        reply = follow(document, operation["reply"]["channel"])
        assert reply["title"] == registry.services[str(tool.service)].response_queue


def request_payload(document: dict[str, Any], tool_key: str) -> dict[str, Any]:
    operation = document["operations"][tool_key]
    [reference] = operation["messages"]
    message = follow(document, follow(document, reference))
    payload: dict[str, Any] = message["payload"]
    return payload


@pytest.mark.parametrize("generation", wire.GENERATIONS)
def test_real_requests_of_both_generations_match_their_tool_s_message(generation: str) -> None:
    registry = workflow()
    document = asyncapi_document(registry, BROKERS["kafka"])
    tool = registry.tool("knowledge-query")
    payload = request_payload(document, tool.key)
    body = json.loads(
        wire.encode_request("ann", dict(tool.config), {"question": "who?"}, generation=generation)
    )

    jsonschema.validate(body, payload)
    [matching] = [schema for schema in payload["anyOf"] if set(schema["required"]) == set(body)]
    arguments = matching["properties"]["arguments"]
    assert arguments["contentMediaType"] == "application/json"
    assert arguments["x-contentSchema"] == json_schema(tool)
    jsonschema.validate(json.loads(body["arguments"]), arguments["x-contentSchema"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({}, arguments["x-contentSchema"])  # the question is required
    config = matching["properties"]["config"]
    assert config["x-contentSchema"]["required"] == ["collection"]
    jsonschema.validate(json.loads(body["config"]), config["x-contentSchema"])


def test_real_answers_and_errors_match_the_response_message() -> None:
    document = asyncapi_document(workflow(), BROKERS["pulsar"])
    message = document["components"]["messages"]["toolbus.response"]
    payload = follow(document, message["payload"])
    headers = follow(document, message["headers"])

    for body in (
        wire.encode_response("an answer"),
        wire.encode_response("a chunk", end_of_stream=False),
        wire.encode_error("tool-service-error", "it broke"),
    ):
        jsonschema.validate(json.loads(body), payload)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"response": "no error key"}, payload)
    jsonschema.validate({"id": "1", "after-execution": "terminate"}, headers)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"after-execution": "terminate"}, headers)  # the id is required
    assert document["components"]["correlationIds"]["call-id"]["location"] == (
        "$message.header#/id"
    )


def test_each_broker_describes_its_channels_and_servers() -> None:
    registry = workflow()
    kafka = asyncapi_document(registry, BROKERS["kafka"])
    pulsar = asyncapi_document(registry, BROKERS["pulsar"])
    nats = asyncapi_document(registry, BROKERS["nats"])

    graph = "persistent://tg/request/graph"
    [kafka_graph] = [c for c in kafka["channels"].values() if c["title"] == graph]
    assert kafka_graph["bindings"] == {
        "kafka": {"topic": "tg.request.graph", "bindingVersion": "0.5.0"}
    }
    assert kafka["operations"]["graph-update"]["bindings"]["kafka"]["groupId"]["enum"] == [
        "graph-service"
    ]
    assert kafka["servers"]["broker"]["protocol"] == "kafka"
    [pulsar_graph] = [c for c in pulsar["channels"].values() if c["title"] == graph]
    assert pulsar_graph["address"] == graph
    assert pulsar_graph["bindings"]["pulsar"]["persistence"] == "persistent"
    assert pulsar["servers"]["broker"] == {
        "host": "pulsar.example:6650",
        "protocol": "pulsar",
        "description": pulsar["servers"]["broker"]["description"],
    }
    assert nats["servers"]["broker"]["host"] == "nats.example:4222"
    assert "s3cret-pw" not in json.dumps(nats)  # credentials never reach the document


def test_rabbitmq_channels_are_the_fanout_exchanges_trustgraph_names() -> None:
    rabbitmq = asyncapi_document(workflow(), BROKERS["rabbitmq"])

    graph = "persistent://tg/request/graph"
    [channel] = [c for c in rabbitmq["channels"].values() if c["title"] == graph]
    assert channel["address"] == "tg.request.graph"
    assert channel["bindings"]["amqp"]["exchange"] == {
        "name": "tg.request.graph",
        "type": "fanout",
        "durable": True,
        "autoDelete": False,
        "vhost": "production",
    }
    bindings = rabbitmq["operations"]["graph-update"]["bindings"]["amqp"]
    assert (bindings["deliveryMode"], bindings["ack"]) == (2, True)
    server = rabbitmq["servers"]["broker"]
    assert (server["host"], server["protocol"], server["pathname"]) == (
        "r1.example:5671",
        "amqps",
        "/production",
    )
    assert "s3cret-pw" not in json.dumps(rabbitmq)


def test_a_service_with_no_tool_still_has_an_operation_and_ids_stay_unique() -> None:
    snapshot = workflow_snapshot()
    snapshot["tool-service"]["odd id/with slash"] = {
        "id": "odd id/with slash",
        "request-queue": "non-persistent://tg/request/odd",
        "response-queue": "non-persistent://tg/response/odd",
    }
    document = asyncapi_document(load_registry(snapshot), None)

    assert schema_problems(document) == []
    operation = document["operations"]["odd_id_with_slash"]
    assert operation["title"] == "odd id/with slash"
    assert "odd_id_with_slash.requests" in document["channels"]


def test_a_broker_url_is_described_by_its_adapter_or_plainly() -> None:
    assert isinstance(asyncapi_broker("nats://127.0.0.1:4222"), NatsAsyncApi)
    memory = asyncapi_broker("memory://demo")
    assert memory.server() == {"host": "demo", "protocol": "memory"}
    with pytest.raises(PluginError, match="carrier-pigeon"):
        asyncapi_broker("carrier-pigeon://coop")
