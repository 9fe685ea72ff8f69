"""Input requests and answers as data, written as MCP writes them, and their wire extension."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolbus.domain.calls import wire
from toolbus.domain.calls.input_requests import (
    Elicitation,
    ElicitationAnswer,
    InputAsk,
    InputReply,
    InputRequired,
    InputUnavailable,
    InvalidInputState,
    Root,
    RootsAnswer,
    RootsRequest,
    Sampling,
    SamplingAnswer,
    answer_from_json,
    answer_to_json,
    input_error,
    kinds_of,
    kinds_property,
    request_from_json,
    request_to_json,
    with_defaults,
)
from toolbus.domain.errors import NotFound, WireError

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "default": "John Doe"},
        "age": {"type": "integer", "default": 30},
        "verified": {"type": "boolean", "default": True},
        "email": {"type": "string"},
    },
}


def test_requests_are_written_as_mcp_writes_them_and_read_back() -> None:
    sampling = Sampling(
        ["What is the capital of France?"],
        max_tokens=100,
        system_prompt="Be brief",
        extra={"modelPreferences": {"hints": [{"name": "sonnet"}]}, "includeContext": "none"},
    )
    written = [request_to_json(r) for r in (Elicitation("Who?", SCHEMA), sampling, RootsRequest())]

    assert written == [
        {"method": "elicitation/create", "params": {"message": "Who?", "requestedSchema": SCHEMA}},
        {
            "method": "sampling/createMessage",
            "params": {
                "modelPreferences": {"hints": [{"name": "sonnet"}]},
                "includeContext": "none",
                "messages": [
                    {
                        "role": "user",
                        "content": {"type": "text", "text": "What is the capital of France?"},
                    }
                ],
                "maxTokens": 100,
                "systemPrompt": "Be brief",
            },
        },
        {"method": "roots/list", "params": {}},
    ]
    # What MCP wrote passes through unchanged.
    assert [request_to_json(request_from_json(item)) for item in written] == written


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        ("elicitation", "must be an object"),
        ({"method": "prompts/get"}, "is not one of elicitation/create"),
        ({"method": "elicitation/create", "params": {"message": "x"}}, "requestedSchema"),
        ({"method": "sampling/createMessage", "params": {"maxTokens": 5}}, "'messages'"),
        ({"method": "sampling/createMessage", "params": {"messages": []}}, "'maxTokens'"),
        ({"method": "sampling/createMessage", "params": [1]}, "params of an"),
    ],
)
def test_a_request_that_is_none_is_refused_saying_why(data: Any, problem: str) -> None:
    with pytest.raises(WireError, match=problem):
        request_from_json(data)


def test_answers_are_read_as_their_request_asks() -> None:
    elicited = answer_from_json(
        Elicitation("Who?", SCHEMA), {"action": "accept", "content": {"name": "Jane"}}
    )
    sampled = answer_from_json(
        Sampling(["hi"]),
        {
            "role": "assistant",
            "content": {"type": "text", "text": "Paris"},
            "model": "m1",
            "stopReason": "endTurn",
        },
    )
    rooted = answer_from_json(RootsRequest(), {"roots": [{"uri": "file:///a", "name": "A"}]})

    # An accepted form gets the defaults for what the person left out.
    assert elicited == ElicitationAnswer("accept", {"name": "Jane", "age": 30, "verified": True})
    assert sampled == SamplingAnswer(
        "Paris", "m1", "endTurn", "assistant", {"type": "text", "text": "Paris"}
    )
    assert rooted == RootsAnswer((Root("file:///a", "A"),))
    assert answer_to_json(rooted) == {"roots": [{"uri": "file:///a", "name": "A"}]}
    assert answer_to_json(ElicitationAnswer("decline", {"ignored": 1})) == {"action": "decline"}


@pytest.mark.parametrize(
    ("request_", "data"),
    [
        (Elicitation("x"), 12345),
        (Elicitation("x"), {"action": "maybe"}),
        (Elicitation("x"), {"action": "accept", "content": [1]}),
        (Sampling(["x"]), {"content": "Paris"}),
        (RootsRequest(), {"roots": [{"name": "no uri"}]}),
    ],
)
def test_an_answer_that_does_not_fit_its_request_is_a_value_error(request_: Any, data: Any) -> None:
    with pytest.raises(ValueError):
        answer_from_json(request_, data)


def test_defaults_fill_only_what_is_left_out() -> None:
    assert with_defaults(SCHEMA, {"age": 41}) == {"age": 41, "name": "John Doe", "verified": True}


def test_kinds_travel_as_a_property_in_a_fixed_order() -> None:
    assert kinds_property(["roots", "elicitation", "nonsense"]) == "elicitation,roots"
    assert kinds_of("roots, sampling,unknown") == {"roots", "sampling"}
    assert kinds_of(None) == frozenset()


def test_the_wire_carries_an_ask_in_an_error_trustgraph_reads_as_one() -> None:
    ask = InputAsk({"ok": Elicitation("Sure?", {"type": "object"})}, "c3RhdGU")
    body = wire.encode_error("input-required", "needs input", ask)
    read = wire.decode_response(body)

    # TrustGraph's decoders take error, response and end_of_stream, and ignore the rest.
    assert {k: v for k, v in json.loads(body).items() if k != "input"} == {
        "error": {"type": "input-required", "message": "needs input"},
        "response": "",
        "end_of_stream": True,
    }
    assert read.is_error and read.input == ask
    error = input_error(read.error_type or "", read.error_message, read.input)
    assert isinstance(error, InputRequired) and error.ask == ask


def test_the_request_that_answers_carries_the_reply_last() -> None:
    reply = InputReply({"ok": {"action": "accept", "content": {"ok": True}}}, "c3RhdGU")
    body = wire.encode_request("alice", {"c": 1}, {"a": 2}, "2.1", reply)

    assert body.startswith(wire.encode_request("alice", {"c": 1}, {"a": 2}, "2.1")[:-1])
    assert wire.decode_request(body) == wire.ToolRequest("alice", {"c": 1}, {"a": 2}, reply)
    with pytest.raises(WireError, match=r"'input\.responses' must be an object"):
        wire.decode_request(b'{"config": "{}", "arguments": "{}", "input": {"responses": [1]}}')


def test_each_input_error_type_is_raised_as_its_class() -> None:
    assert isinstance(input_error("input-unavailable", "m", None), InputUnavailable)
    assert isinstance(input_error("invalid-input-state", "m", None), InvalidInputState)
    assert isinstance(input_error("not-found", "m", None), NotFound)
