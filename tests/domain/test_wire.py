"""The tool-service envelope: byte-for-byte what TrustGraph writes (docs/wire-protocol.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from toolbus.domain.calls.wire import (
    GENERIC_ERROR,
    ToolRequest,
    ToolResponse,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
    generation_of,
    observation_text,
)
from toolbus.domain.errors import WireError

# --------------------------------------------------------------------------- encoding


def test_a_request_is_byte_identical_to_trustgraphs() -> None:
    config = {"collection": "customers"}
    arguments = {"question": "What are the top customer complaints?"}

    body = encode_request("alice", config, arguments)

    expected = {"user": "alice", "config": json.dumps(config), "arguments": json.dumps(arguments)}
    assert body == json.dumps(expected).encode("utf-8")
    assert body == (
        b'{"user": "alice", "config": "{\\"collection\\": \\"customers\\"}", '
        b'"arguments": "{\\"question\\": \\"What are the top customer complaints?\\"}"}'
    )


def test_non_ascii_is_escaped_at_both_levels() -> None:
    body = encode_request("zoë", {"city": "Zürich"}, {"q": "日本"})

    assert body.isascii()
    assert body == json.dumps(
        {
            "user": "zoë",
            "config": json.dumps({"city": "Zürich"}),
            "arguments": json.dumps({"q": "日本"}),
        }
    ).encode("utf-8")
    assert b'"user": "zo\\u00eb"' in body


@pytest.mark.parametrize("empty", [None, {}, ""])
def test_empty_config_and_arguments_are_written_as_an_empty_object(empty: Any) -> None:
    assert encode_request("alice", empty, empty) == (
        b'{"user": "alice", "config": "{}", "arguments": "{}"}'
    )


def test_json_strings_are_passed_through_unchanged() -> None:
    body = encode_request("alice", '{"a":1}', '{"b": 2}')

    assert json.loads(body) == {"user": "alice", "config": '{"a":1}', "arguments": '{"b": 2}'}


def test_a_value_that_is_not_json_is_a_wire_error() -> None:
    with pytest.raises(WireError, match="arguments cannot be encoded"):
        encode_request("alice", None, {"when": object()})


def test_a_response_is_byte_identical_to_trustgraphs() -> None:
    assert encode_response("Hey alice!") == json.dumps(
        {"error": None, "response": "Hey alice!", "end_of_stream": True}
    ).encode("utf-8")
    assert encode_response("part", end_of_stream=False) == (
        b'{"error": null, "response": "part", "end_of_stream": false}'
    )
    assert (
        encode_response("café")
        == b'{"error": null, "response": "caf\\u00e9", "end_of_stream": true}'
    )


def test_an_error_response_is_byte_identical_to_trustgraphs() -> None:
    body = encode_error("tool-service-error", "no jokes about ünïcode")

    assert body == json.dumps(
        {
            "error": {"type": "tool-service-error", "message": "no jokes about ünïcode"},
            "response": "",
            "end_of_stream": True,
        }
    ).encode("utf-8")


@pytest.mark.parametrize(
    ("result", "text"),
    [("plain", "plain"), ({"a": 1}, '{"a": 1}'), ([1, "ü"], '[1, "\\u00fc"]'), (None, "null")],
)
def test_observations_are_strings_or_json(result: Any, text: str) -> None:
    assert observation_text(result) == text


def test_an_observation_that_is_not_json_falls_back_to_str() -> None:
    assert observation_text({1, 2}) == "{1, 2}"


# --------------------------------------------------------------------------- decoding


def test_a_request_decodes_to_dicts() -> None:
    body = (
        b'{"user": "alice", "config": "{\\"collection\\": \\"c\\"}", "arguments": "{\\"q\\": 1}"}'
    )

    assert decode_request(body) == ToolRequest("alice", {"collection": "c"}, {"q": 1})
    assert decode_request(body.decode()) == decode_request(body)


@pytest.mark.parametrize(
    "body", [b"{}", b'{"user": null, "config": null, "arguments": ""}', b'{"config": "{}"}']
)
def test_missing_request_fields_take_defaults(body: bytes) -> None:
    assert decode_request(body) == ToolRequest("", {}, {})


def test_unknown_keys_are_ignored() -> None:
    request = decode_request(b'{"user": "a", "trace": [1], "config": "{}", "extra": {}}')
    response = decode_response(b'{"response": "ok", "end_of_stream": true, "usage": {"t": 1}}')

    assert request == ToolRequest("a", {}, {})
    assert response == ToolResponse("ok")


def test_an_inline_object_is_accepted_for_config_and_arguments() -> None:
    assert decode_request(b'{"arguments": {"q": 1}}').arguments == {"q": 1}


def test_a_success_response_decodes() -> None:
    response = decode_response(encode_response("Hey!"))

    assert response == ToolResponse(response="Hey!", end_of_stream=True)
    assert not response.is_error


def test_a_missing_end_of_stream_means_more_follows() -> None:
    assert decode_response(b'{"error": null, "response": "x"}').end_of_stream is False


def test_missing_response_fields_take_defaults() -> None:
    assert decode_response(b"{}") == ToolResponse("", None, "", False)


def test_an_error_response_decodes() -> None:
    response = decode_response(encode_error("not-found", "no such collection"))

    assert response.is_error
    assert response.error_type == "not-found"
    assert response.error_message == "no such collection"
    assert response.end_of_stream is True


@pytest.mark.parametrize(
    "body",
    [
        b'{"error": {}, "response": "", "end_of_stream": true}',
        b'{"error": {}, "response": "ignored", "end_of_stream": false}',
        b'{"error": {"type": "", "message": null}}',
    ],
)
def test_an_empty_error_object_is_a_failure_that_ends_the_stream(body: bytes) -> None:
    response = decode_response(body)

    assert response.is_error
    assert response.error_type == GENERIC_ERROR
    assert response.error_message == ""
    assert response.end_of_stream is True


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"", "not valid JSON"),
        (b"not json", "not valid JSON"),
        (b"\xff\xfe", "not valid UTF-8"),
        (b"[]", "must be a JSON object, got list"),
        (b'"text"', "must be a JSON object, got str"),
        (b'{"user": 5}', "'user' must be a string"),
        (b'{"config": 5}', "'config' must be a JSON string"),
        (b'{"config": "{bad"}', "'config' is not valid JSON"),
        (b'{"arguments": "[1]"}', "'arguments' must be a JSON object, got list"),
        (b"[" * 100_000 + b"]" * 100_000, "not valid JSON"),
    ],
)
def test_malformed_requests_raise_wire_errors(body: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_request(body)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{", "not valid JSON"),
        (b"null", "must be a JSON object"),
        (b'{"response": 5}', "'response' must be a string"),
        (b'{"end_of_stream": "yes"}', "'end_of_stream' must be a boolean"),
        (b'{"error": "boom"}', "'error' must be an object"),
        (b'{"error": {"type": 5}}', "string 'type' and 'message'"),
        (b'{"error": {"message": ["x"]}}', "string 'type' and 'message'"),
    ],
)
def test_malformed_responses_raise_wire_errors(body: bytes, reason: str) -> None:
    with pytest.raises(WireError, match=reason):
        decode_response(body)


def test_a_wire_error_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        decode_request(b"nope")


@pytest.mark.parametrize("wrap", [bytearray, memoryview])
def test_other_byte_buffers_decode_like_bytes(wrap: Any) -> None:
    body = encode_request("zoë", {"a": 1}, {"b": "ü"})

    assert decode_request(wrap(body)) == ToolRequest("zoë", {"a": 1}, {"b": "ü"})
    assert decode_response(wrap(encode_response("ok"))) == ToolResponse("ok")


# --------------------------------------------------------------------------- generations


def test_a_2_4_request_is_byte_identical_to_trustgraphs() -> None:
    config, arguments = {"collection": "Zürich"}, {"q": "日本"}
    expected = json.dumps({"config": json.dumps(config), "arguments": json.dumps(arguments)})

    assert encode_request("alice", config, arguments, "2.4") == expected.encode()
    assert encode_request("", None, None, "2.4") == b'{"config": "{}", "arguments": "{}"}'


def test_a_release_may_stand_for_its_generation() -> None:
    assert encode_request("a", None, None, "2.11.1") == encode_request("a", None, None, "2.4")
    assert encode_request("a", None, None, "2.3.21") == encode_request("a", None, None, "2.1")


@pytest.mark.parametrize(
    ("version", "generation"),
    [("2.1", "2.1"), ("2.3", "2.1"), ("2.3.21", "2.1"), ("2.4", "2.4"), ("2.4.0", "2.4"),
     ("2.11.1", "2.4"), (" 2.10 ", "2.4")],
)  # fmt: skip
def test_generation_of_a_release(version: str, generation: str) -> None:
    assert generation_of(version) == generation


@pytest.mark.parametrize("version", ["1.9.4", "2.0.14", "3.0", "2", "", "latest", "2.x"])
def test_a_release_without_tool_services_is_refused_with_the_choices(version: str) -> None:
    with pytest.raises(WireError, match=r"use '2.1' .* or '2.4'"):
        generation_of(version)


def test_both_generations_decode_alike_but_for_the_user() -> None:
    old = decode_request(encode_request("alice", {"c": 1}, {"a": 2}, "2.1"))
    new = decode_request(encode_request("alice", {"c": 1}, {"a": 2}, "2.4"))

    assert old == ToolRequest("alice", {"c": 1}, {"a": 2})
    assert new == ToolRequest("", {"c": 1}, {"a": 2})
