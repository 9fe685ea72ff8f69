"""Properties that must hold for every input, not just the examples we thought of."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from toolbus.domain.calls.naming import sanitize_toolname
from toolbus.domain.calls.wire import (
    GENERIC_ERROR,
    _decode_request_stepwise,
    _decode_response_stepwise,
    _read_large_request,
    _read_large_response,
    decode_request,
    decode_response,
    encode_error,
    encode_request,
    encode_response,
)
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import WireError

VALID_LLM_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")

# JSON values as the wire carries them; NaN is excluded because it never equals itself.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)


# --------------------------------------------------------------------------- wire


@given(user=st.text(), config=json_objects, arguments=json_objects)
def test_a_request_survives_the_round_trip(
    user: str, config: dict[str, Any], arguments: dict[str, Any]
) -> None:
    request = decode_request(encode_request(user, config, arguments))

    assert (request.user, request.config, request.arguments) == (user, config, arguments)


@given(text=st.text(), end=st.booleans())
def test_a_response_survives_the_round_trip(text: str, end: bool) -> None:
    response = decode_response(encode_response(text, end_of_stream=end))

    assert (response.response, response.end_of_stream, response.is_error) == (text, end, False)


@given(error_type=st.text(), message=st.text())
def test_an_error_survives_the_round_trip(error_type: str, message: str) -> None:
    response = decode_response(encode_error(error_type, message))

    assert response.is_error
    assert response.error_type == (error_type or GENERIC_ERROR)
    assert response.error_message == message
    assert response.end_of_stream


# Strings with lone surrogates: json accepts their escapes, stricter parsers do not.
any_strings = st.text() | st.text(st.characters(categories=["Cs"]), min_size=1)
any_objects = st.dictionaries(any_strings, json_values | any_strings, max_size=5)
json_texts = (
    any_objects.map(json.dumps)
    | any_objects.map(lambda value: json.dumps(value, ensure_ascii=False, indent=1))
    | st.text()
)


@given(arguments=json_texts)
def test_the_decoder_reads_json_exactly_as_json_does(arguments: str) -> None:
    """The fast parser must never read a text differently from json, nor refuse more."""
    body = json.dumps({"arguments": arguments})
    carried = json.loads(body)["arguments"]  # escaped surrogate pairs come out joined
    try:
        expected: Any = json.loads(carried or "{}")  # "" means no arguments
    except ValueError:
        expected = WireError
    try:
        decoded: Any = decode_request(body).arguments
    except WireError:
        decoded = WireError
    if expected is not WireError and not isinstance(expected, dict):
        expected = WireError  # arguments must be an object
    assert decoded == expected


envelope_values = json_values | json_texts | json_values.map(json.dumps) | any_objects | st.just("")
envelopes = st.fixed_dictionaries(
    {},
    optional=dict.fromkeys(
        ["user", "config", "arguments", "error", "response", "end_of_stream", "other"],
        envelope_values,
    ),
)


def _object_text(pairs: list[tuple[str, Any]]) -> str:
    """A JSON object written pair by pair, so a key may come twice."""
    return "{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in pairs) + "}"


# Envelopes of every shape (a key may come twice), and anything at all.
bodies = (
    envelopes.map(json.dumps)
    | st.tuples(envelopes, envelopes).map(
        lambda two: _object_text([*two[0].items(), *two[1].items()])
    )
    | st.text()
    | st.binary()
)


def _outcome(decode: Any, body: bytes | str) -> Any:
    try:
        return decode(body)
    except WireError as exc:
        return ("WireError", str(exc))


@settings(max_examples=500)
@given(body=bodies)
def test_the_one_pass_decoders_agree_with_the_stepwise_ones(body: str | bytes) -> None:
    """The one-pass read is only a shortcut: same result, same error, on any input."""
    for text in (body, body.encode() if isinstance(body, str) and body.isascii() else body):
        assert _outcome(decode_request, text) == _outcome(_decode_request_stepwise, text)
        assert _outcome(decode_response, text) == _outcome(_decode_response_stepwise, text)


@settings(max_examples=500)
@given(body=bodies)
@example(body=json.dumps({"arguments": json.dumps({"n": [1, {"m": 2**64 + 1}]})}))
@example(body=json.dumps({"config": json.dumps({"n": -(2**63) - 1})}))
def test_the_readers_of_large_bodies_agree_with_the_stepwise_decoders(body: str | bytes) -> None:
    """Large bodies take orjson: whatever it reads must be what the rules read.

    Called on bodies of every size, so that every shape meets the shortcut.
    """
    for text in (body, body.encode() if isinstance(body, str) and body.isascii() else body):
        if (request := _read_large_request(text)) is not None:
            assert request == _decode_request_stepwise(text)
        if (response := _read_large_response(text)) is not None:
            assert response == _decode_response_stepwise(text)


@given(
    user=st.text(),
    arguments=st.dictionaries(st.text(), st.text(min_size=1024) | json_values, max_size=3),
    text=st.text(min_size=1024),
)
def test_large_bodies_survive_the_round_trip(
    user: str, arguments: dict[str, Any], text: str
) -> None:
    request = decode_request(encode_request(user, None, arguments))
    response = decode_response(encode_response(text))

    assert (request.user, request.arguments, response.response) == (user, arguments, text)


@given(body=st.binary() | st.text() | json_values.map(json.dumps))
def test_decoders_raise_only_wire_errors(body: bytes | str) -> None:
    for decode in (decode_request, decode_response):
        with contextlib.suppress(WireError):
            decode(body)


@given(
    body=st.dictionaries(
        st.sampled_from(["user", "config", "arguments", "error", "response", "end_of_stream"]),
        json_values | json_objects.map(json.dumps),
    )
)
def test_decoders_raise_only_wire_errors_on_plausible_shapes(body: dict[str, Any]) -> None:
    encoded = json.dumps(body).encode()
    for decode in (decode_request, decode_response):
        with contextlib.suppress(WireError):
            decode(encoded)


# --------------------------------------------------------------------------- naming


@given(st.text())
def test_sanitize_toolname_is_valid_and_idempotent(name: str) -> None:
    once = sanitize_toolname(name)

    assert VALID_LLM_NAME.match(once)
    assert sanitize_toolname(once) == once


@given(st.from_regex(VALID_LLM_NAME, fullmatch=True))
def test_sanitize_toolname_keeps_valid_names(name: str) -> None:
    assert sanitize_toolname(name) == name


# --------------------------------------------------------------------------- filtering

GROUPS = ["a", "b", "c", "d", "default"]
STATES = ["undefined", "x", "y"]

tool_fields = st.fixed_dictionaries(
    {},
    optional={
        "group": st.lists(st.sampled_from(GROUPS), max_size=3),
        "applicable-states": st.lists(st.sampled_from([*STATES, "*"]), max_size=3),
    },
)
requested_groups = st.none() | st.lists(st.sampled_from([*GROUPS, "*", "unknown"]), max_size=4)
states = st.none() | st.sampled_from(["", *STATES, "*"])


@st.composite
def registries(draw: st.DrawFn) -> Registry:
    fields = draw(st.lists(tool_fields, min_size=0, max_size=8))
    tools = {
        f"t{i}": {"type": "tool-service", "name": f"t{i}", "description": "d", "service": "s"} | f
        for i, f in enumerate(fields)
    }
    service = {"request-queue": "req", "response-queue": "resp"}
    return load_registry({"tool-service": {"s": service}, "tool": tools})


def expected_available(registry: Registry, groups: list[str] | None, state: str | None) -> set[str]:
    """The filtering rules of docs/groups-and-states.md, written out as plainly as possible."""
    requested = ["default"] if groups is None else groups
    current = state or "undefined"
    result = set()
    for tool in registry.tools.values():
        group_ok = "*" in requested or bool(set(requested) & set(tool.groups))
        states = tool.applicable_states
        state_ok = states is None or "*" in states or current in states
        if group_ok and state_ok:
            result.add(tool.name)
    return result


@settings(max_examples=200)
@given(registry=registries(), groups=requested_groups, state=states)
def test_filtering_follows_the_design(
    registry: Registry, groups: list[str] | None, state: str | None
) -> None:
    result = registry.availability(groups, state)
    available = [t.name for t in result.available]

    assert set(available) == expected_available(registry, groups, state)
    assert set(available) <= set(registry.tools)
    # The three lists partition the tools, each in configuration order.
    order = list(registry.tools)
    for part in (available, list(result.filtered_by_group), list(result.filtered_by_state)):
        assert part == [n for n in order if n in part]
    assert sorted([*available, *result.filtered_by_group, *result.filtered_by_state]) == sorted(
        order
    )
    for name in order:
        assert registry.is_available(name, groups, state) == (name in available)


@settings(max_examples=200)
@given(
    registry=registries(),
    smaller=st.lists(st.sampled_from([*GROUPS, "*"]), max_size=3),
    extra=st.lists(st.sampled_from([*GROUPS, "*"]), max_size=3),
    state=states,
)
def test_more_groups_never_offer_fewer_tools(
    registry: Registry, smaller: list[str], extra: list[str], state: str | None
) -> None:
    fewer = set(registry.available(smaller, state))
    more = set(registry.available(smaller + extra, state))

    assert fewer <= more <= set(registry.tools.values())
