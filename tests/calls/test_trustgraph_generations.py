"""Which TrustGraph request a client writes; streamed answers joined for callers that need it."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from toolbus import ToolService, ToolServiceClient, running, tool_service
from toolbus.application.calls.tools import Tools
from toolbus.domain.calls import wire
from toolbus.domain.config.loading import load_registry
from toolbus.domain.errors import WireError
from toolbus.memory.bus import MemoryBus, MemorySubscription, connect

pytestmark = pytest.mark.anyio


@pytest.fixture
async def bus() -> AsyncIterator[MemoryBus]:
    bus = await connect(f"memory://generations-{uuid.uuid4().hex}")
    yield bus
    await bus.close()


@tool_service("who", config_params=["join-stream"])
async def who(user: str, config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return user


def chunks_service(service_id: str, *, join_stream: bool = False) -> Any:
    @tool_service(service_id, config_params=["join-stream"], join_stream=join_stream)
    async def chunks(
        user: str, config: dict[str, Any], arguments: dict[str, Any]
    ) -> AsyncIterator[str]:
        for chunk in arguments["chunks"]:
            yield chunk

    return chunks


ROUTE = {"request_queue": who.request_queue, "response_queue": who.response_queue}


async def next_body(spy: MemorySubscription) -> tuple[bytes, dict[str, str]]:
    async for delivery in spy:
        return delivery.body, dict(delivery.properties)
    raise AssertionError("the spy's subscription ended")


async def test_by_default_the_body_has_no_user_and_the_user_rides_as_a_property(
    bus: MemoryBus,
) -> None:
    spy = await bus.subscribe(who.request_queue)
    async with running(bus, who), ToolServiceClient(bus) as client:
        answer = await client.call(**ROUTE, user="alice", arguments={"q": 1})
    body, properties = await next_body(spy)

    assert body == json.dumps({"config": "{}", "arguments": json.dumps({"q": 1})}).encode()
    assert properties[wire.PROP_USER] == "alice"
    # A toolbus service still knows who called.
    assert answer == "alice"


async def test_the_2_1_generation_writes_the_user_in_the_body_only(bus: MemoryBus) -> None:
    spy = await bus.subscribe(who.request_queue)
    async with running(bus, who), ToolServiceClient(bus) as client:
        answer = await client.call(**ROUTE, user="alice", generation="2.1")
    body, properties = await next_body(spy)

    assert body == wire.encode_request("alice", None, None, "2.1")
    assert wire.PROP_USER not in properties
    assert answer == "alice"


async def test_no_user_means_no_user_property(bus: MemoryBus) -> None:
    spy = await bus.subscribe(who.request_queue)
    async with running(bus, who), ToolServiceClient(bus) as client:
        assert await client.call(**ROUTE) == ""
    _, properties = await next_body(spy)

    assert wire.PROP_USER not in properties


async def test_a_generation_that_does_not_exist_is_refused_before_sending(
    bus: MemoryBus,
) -> None:
    async with ToolServiceClient(bus) as client:
        with pytest.raises(WireError, match=r"'2\.1'.*'2\.4'"):
            await client.call(**ROUTE, generation="1.9")
        with pytest.raises(WireError, match=r"'2\.1'.*'2\.4'"):
            async for _ in client.stream(**ROUTE, generation="3"):
                pass


async def test_a_configured_tool_writes_its_service_s_generation(bus: MemoryBus) -> None:
    registry = load_registry(
        {
            "tool-service": {"who": {**who.descriptor(), "trustgraph-wire": "2.1.28"}},
            "tool": {"who": {"type": "tool-service", "name": "who", "description": "d",
                             "service": "who"}},
        }
    )  # fmt: skip
    spy = await bus.subscribe(who.request_queue)
    async with running(bus, who), ToolServiceClient(bus) as client:
        observation = await Tools(client, registry).call("who", {}, user="bob")
    body, _ = await next_body(spy)

    assert observation == "bob"
    assert json.loads(body)["user"] == "bob"


async def answers(
    bus: MemoryBus, service: Any, config: dict[str, Any], **host_options: Any
) -> list[bytes]:
    """The response bodies a service sends for one call."""
    spy = await bus.subscribe(service.response_queue)
    async with running(bus, service, **host_options), ToolServiceClient(bus) as client:
        text = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            config=config,
            arguments={"chunks": ["Why ", "so ", "serious?"]},
        )
    assert text == "Why so serious?"
    bodies = []
    while True:
        body, _ = await next_body(spy)
        bodies.append(body)
        if wire.decode_response(body).end_of_stream:
            return bodies


async def test_a_stream_is_several_responses_by_default(bus: MemoryBus) -> None:
    bodies = await answers(bus, chunks_service("plain"), {})

    assert [wire.decode_response(body).response for body in bodies] == [
        "Why ",
        "so ",
        "serious?",
        "",
    ]


async def test_a_service_may_join_every_stream_into_one_response(bus: MemoryBus) -> None:
    bodies = await answers(bus, chunks_service("joined", join_stream=True), {})

    assert bodies == [wire.encode_response("Why so serious?")]


async def test_a_tool_may_ask_for_its_answers_joined(bus: MemoryBus) -> None:
    bodies = await answers(bus, chunks_service("per-tool"), {"join-stream": True})

    assert bodies == [wire.encode_response("Why so serious?")]


async def test_a_host_may_join_the_streams_of_whatever_it_serves(bus: MemoryBus) -> None:
    bodies = await answers(bus, chunks_service("hosted"), {}, join_stream=True)

    assert bodies == [wire.encode_response("Why so serious?")]


async def test_a_host_may_stream_what_a_service_would_join(bus: MemoryBus) -> None:
    bodies = await answers(bus, chunks_service("unjoined", join_stream=True), {}, join_stream=False)

    assert len(bodies) == 4


@tool_service("ported-function")
async def ported_function(config: dict[str, Any], arguments: dict[str, Any]) -> str:
    return json.dumps([config, arguments])


class PortedService(ToolService):
    """A TrustGraph 2.4 service's invoke, moved over as it was."""

    id = "ported-class"

    async def invoke(self, config: dict[str, Any], arguments: dict[str, Any]) -> str:  # type: ignore[override]
        return json.dumps([config, arguments])


@pytest.mark.parametrize("service", [ported_function, PortedService()], ids=["function", "class"])
async def test_a_service_may_take_config_and_arguments_only_as_trustgraph_2_4_does(
    bus: MemoryBus, service: Any
) -> None:
    async with running(bus, service), ToolServiceClient(bus) as client:
        answer = await client.call(
            request_queue=service.request_queue,
            response_queue=service.response_queue,
            user="alice",
            config={"collection": "c"},
            arguments={"arguments": 1, "q": "x"},
        )

    assert json.loads(answer) == [{"collection": "c"}, {"arguments": 1, "q": "x"}]


@pytest.mark.parametrize("value", ["true", "True"])
async def test_join_stream_may_be_given_as_text(bus: MemoryBus, value: str) -> None:
    bodies = await answers(bus, chunks_service(f"text-{value}"), {"join-stream": value})

    assert bodies == [wire.encode_response("Why so serious?")]


@pytest.mark.parametrize("value", [False, "false", "yes", 1])
async def test_anything_else_leaves_the_stream_as_it_is(bus: MemoryBus, value: Any) -> None:
    bodies = await answers(bus, chunks_service(f"other-{value}"), {"join-stream": value})

    assert len(bodies) == 4


async def test_a_descriptor_s_generation_applies_unless_the_call_names_one(
    bus: MemoryBus,
) -> None:
    registry = load_registry(
        {"tool-service": {"who": {**who.descriptor(), "trustgraph-wire": "2.1"}}}
    )
    descriptor = registry.services["who"]
    spy = await bus.subscribe(who.request_queue)
    async with running(bus, who), ToolServiceClient(bus) as client:
        await client.call(service=descriptor, user="ann")
        await client.call(service=descriptor, user="ann", generation="2.4")
        chunks = [c async for c in client.stream(service=descriptor, user="ann")]
    bodies = [(await next_body(spy))[0] for _ in range(3)]

    assert chunks == ["ann"]
    assert [json.loads(body).get("user") for body in bodies] == ["ann", None, "ann"]
