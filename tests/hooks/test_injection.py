"""Synthetic tool-call injection: ids, placement for both frequencies, TTL freshness."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import pytest

from toolbus.domain.hooks.injection import (
    SyntheticPair,
    find_latest_pair,
    h6,
    identity_prefix,
    inject,
    make_call_id,
    parse_ttl_expiry,
    ttl_is_fresh,
)

TOOL = "memory_get"
ARGS: dict[str, Any] = {"k": 1}
NOW = 1_700_000_000

SYSTEM = {"role": "system", "content": "You are helpful."}
USER_1 = {"role": "user", "content": "hi"}
ASSISTANT_1 = {"role": "assistant", "content": "hello"}
USER_2 = {"role": "user", "content": "what do you remember?"}


def sha6(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:6]


def expected_id(content: str, *, args_json: str = '{"k": 1}', suffix: str = "") -> str:
    """The documented id, built by hand rather than through the code under test."""
    return f"synth_t_{sha6(TOOL)}_a_{sha6(args_json)}_c_{sha6(content)}{suffix}"


def pair(call_id: str, content: str, arguments: str = '{"k": 1}') -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": TOOL, "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": content},
    ]


def run(
    messages: Sequence[Mapping[str, Any]],
    content: str,
    frequency: Any = "append_if_changed",
    *,
    arguments: Mapping[str, Any] = ARGS,
    ttl_expiry: int | None = None,
) -> list[dict[str, Any]]:
    return inject(
        messages,
        tool_name=TOOL,
        arguments=arguments,
        content=content,
        frequency=frequency,
        ttl_expiry=ttl_expiry,
    )


def call_ids(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [c["id"] for m in messages for c in m.get("tool_calls") or ()]


# --- hashing and ids -------------------------------------------------------------


def test_h6_of_known_strings() -> None:
    assert h6("") == "e3b0c4"
    assert h6("abc") == "ba7816"
    assert h6("é") == sha6("é")  # UTF-8, not the platform's encoding


def test_id_format_exactly() -> None:
    args_json = '{"k": 1}'  # json.dumps with sort_keys, written out by hand

    assert make_call_id("memory_get", {"k": 1}, "x") == (
        f"synth_t_{sha6('memory_get')}_a_{sha6(args_json)}_c_{sha6('x')}"
    )


def test_id_with_ttl_ends_in_eight_lower_case_hex_digits() -> None:
    assert make_call_id(TOOL, ARGS, "x", ttl_expiry=255) == expected_id("x", suffix="_ttl_000000ff")
    assert make_call_id(TOOL, ARGS, "x", ttl_expiry=0x6553F100).endswith("_ttl_6553f100")


def test_argument_order_does_not_change_identity() -> None:
    assert identity_prefix(TOOL, {"a": 1, "b": 2}) == identity_prefix(TOOL, {"b": 2, "a": 1})
    sorted_json = '{"a": 1, "b": 2}'
    assert identity_prefix(TOOL, {"a": 1, "b": 2}) == f"synth_t_{sha6(TOOL)}_a_{sha6(sorted_json)}_"


def test_empty_arguments_hash_as_an_empty_object() -> None:
    assert identity_prefix(TOOL, {}) == f"synth_t_{sha6(TOOL)}_a_{sha6('{}')}_"


def test_negative_expiry_is_refused() -> None:
    with pytest.raises(ValueError, match="ttl_expiry"):
        make_call_id(TOOL, ARGS, "x", ttl_expiry=-1)


def test_fractional_expiry_is_refused() -> None:
    # A float here means the caller forgot to round `now`; say so instead of a format error.
    with pytest.raises(TypeError, match="whole Unix seconds"):
        make_call_id(TOOL, ARGS, "x", ttl_expiry=NOW + 0.5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("call_id", "expiry"),
    [
        (expected_id("x", suffix="_ttl_000000ff"), 255),
        (expected_id("x", suffix="_n_2_ttl_6553f100"), 0x6553F100),
        (expected_id("x", suffix="_ttl_1000000000"), 0x1000000000),  # past 2106 still reads
        (expected_id("x"), None),
        (expected_id("x", suffix="_ttl_"), None),
        (expected_id("x", suffix="_ttl_zzzzzzzz"), None),
        (expected_id("x", suffix="_ttl_6553F100"), None),  # we never write upper case
        (expected_id("x", suffix="_ttl_ff"), None),  # too short to be ours
        ("call_abc", None),
    ],
)
def test_parse_ttl_expiry(call_id: str, expiry: int | None) -> None:
    assert parse_ttl_expiry(call_id) == expiry


# --- append_if_changed: placement ------------------------------------------------


def test_append_if_changed_on_an_empty_list() -> None:
    assert run([], "x") == pair(expected_id("x"), "x")


def test_append_if_changed_with_only_a_system_message_appends() -> None:
    assert run([SYSTEM], "x") == [SYSTEM, *pair(expected_id("x"), "x")]


def test_append_if_changed_inserts_after_the_first_user_message() -> None:
    history = [SYSTEM, USER_1, ASSISTANT_1, USER_2]

    assert run(history, "x") == [SYSTEM, USER_1, *pair(expected_id("x"), "x"), ASSISTANT_1, USER_2]


def test_append_if_changed_same_content_again_does_not_grow() -> None:
    first = run([SYSTEM, USER_1, ASSISTANT_1, USER_2], "x")

    second = run(first, "x")
    third = run([*second, {"role": "user", "content": "more"}], "x")

    assert second == first
    assert third == [*first, {"role": "user", "content": "more"}]


def test_append_if_changed_changed_content_is_appended_at_the_end() -> None:
    first = run([USER_1, ASSISTANT_1, USER_2], "A")

    second = run(first, "B")

    assert second == [*first, *pair(expected_id("B"), "B")]


def test_a_then_b_then_a_appends_a_again() -> None:
    # We compare with the *latest* pair (B), so A counts as changed.
    history = [USER_1]
    history = run(history, "A")
    history = run(history, "B")
    history = run(history, "A")

    assert [m["content"] for m in history if m["role"] == "tool"] == ["A", "B", "A"]
    assert history[-1]["content"] == "A"
    # A's plain id is already used by the first pair, so the second A gets a counter.
    assert call_ids(history) == [
        expected_id("A"),
        expected_id("B"),
        expected_id("A", suffix="_n_1"),
    ]


def test_a_then_b_then_a_twice_keeps_the_counted_pair() -> None:
    history = run(run(run([USER_1], "A"), "B"), "A")

    assert run(history, "A") == history


def test_different_arguments_give_separate_pairs() -> None:
    first = run([USER_1, ASSISTANT_1], "x", arguments={"k": 1})

    second = run(first, "x", arguments={"k": 2})

    # No pair of the new identity yet: it goes right after the first user message too.
    assert second == [
        USER_1,
        *pair(expected_id("x", args_json='{"k": 2}'), "x", arguments='{"k": 2}'),
        *pair(expected_id("x"), "x"),
        ASSISTANT_1,
    ]


def test_same_content_replaces_in_place_and_restamps_the_ttl() -> None:
    first = run([USER_1, ASSISTANT_1, USER_2], "x", ttl_expiry=NOW + 60)

    second = run(first, "x", ttl_expiry=NOW + 3600)

    assert len(second) == len(first)
    assert second[1:3] == pair(expected_id("x", suffix=f"_ttl_{NOW + 3600:08x}"), "x")
    assert parse_ttl_expiry(second[1]["tool_calls"][0]["id"]) == NOW + 3600
    assert second[2]["tool_call_id"] == second[1]["tool_calls"][0]["id"]


def test_replacement_is_judged_by_the_content_hash_in_the_id() -> None:
    # A client shortened the stored observation; our id still says it was "x".
    history = [USER_1, *pair(expected_id("x"), "x (truncated)")]

    assert run(history, "x") == [USER_1, *pair(expected_id("x"), "x")]


def test_replacement_keeps_other_calls_and_keys_of_the_messages() -> None:
    ours = pair(expected_id("x"), "x")
    other_call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    assistant = {**ours[0], "tool_calls": [other_call, *ours[0]["tool_calls"]], "name": "bot"}
    history = [
        USER_1,
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "f"},
        ours[1],
    ]

    result = run(history, "x", ttl_expiry=NOW)

    new_id = expected_id("x", suffix=f"_ttl_{NOW:08x}")
    assert result[1]["name"] == "bot"
    assert call_ids(result) == ["call_1", new_id]
    assert result[2] == history[2]
    assert result[3] == {"role": "tool", "tool_call_id": new_id, "content": "x"}


def test_a_call_without_an_answer_is_not_a_pair() -> None:
    orphan = pair(expected_id("x"), "x")[0]

    result = run([USER_1, orphan], "x")

    # Placed as if new, and with an id the orphan does not already use.
    assert result == [USER_1, *pair(expected_id("x", suffix="_n_1"), "x"), orphan]


# --- always ----------------------------------------------------------------------


def test_always_on_an_empty_list() -> None:
    assert run([], "x", "always") == pair(expected_id("x"), "x")


def test_always_with_only_a_system_message_appends() -> None:
    assert run([SYSTEM], "x", "always") == [SYSTEM, *pair(expected_id("x"), "x")]


def test_always_appends_at_the_end_even_with_user_messages() -> None:
    history = [SYSTEM, USER_1, ASSISTANT_1, USER_2]

    assert run(history, "x", "always") == [*history, *pair(expected_id("x"), "x")]


def test_always_grows_every_time_with_unique_deterministic_ids() -> None:
    history = [USER_1]
    for _ in range(3):
        history = run(history, "x", "always")

    assert len(history) == 7
    assert call_ids(history) == [
        expected_id("x"),
        expected_id("x", suffix="_n_1"),
        expected_id("x", suffix="_n_2"),
    ]
    assert run([USER_1], "x", "always") == run([USER_1], "x", "always")


def test_always_puts_the_counter_before_the_ttl() -> None:
    history = run([USER_1], "x", "always", ttl_expiry=NOW)

    history = run(history, "x", "always", ttl_expiry=NOW)

    assert call_ids(history)[-1] == expected_id("x", suffix=f"_n_1_ttl_{NOW:08x}")
    assert parse_ttl_expiry(call_ids(history)[-1]) == NOW


def test_always_with_a_new_expiry_needs_no_counter() -> None:
    history = run(run([USER_1], "x", "always", ttl_expiry=NOW), "x", "always", ttl_expiry=NOW + 1)

    assert call_ids(history) == [
        expected_id("x", suffix=f"_ttl_{NOW:08x}"),
        expected_id("x", suffix=f"_ttl_{NOW + 1:08x}"),
    ]


# --- input handling --------------------------------------------------------------


@pytest.mark.parametrize("frequency", ["always", "append_if_changed"])
def test_the_input_is_never_mutated(frequency: str) -> None:
    history = [SYSTEM, USER_1, *pair(expected_id("x"), "x"), ASSISTANT_1, USER_2]
    before = copy.deepcopy(history)

    for content in ("x", "y"):
        result = run(history, content, frequency, ttl_expiry=NOW)
        assert result is not history

    assert history == before


def test_non_dict_mappings_come_back_as_dicts() -> None:
    history = [MappingProxyType(USER_1)]

    result = run(history, "x")

    assert result == [USER_1, *pair(expected_id("x"), "x")]
    assert all(type(m) is dict for m in result)


def test_unknown_frequency_is_refused() -> None:
    with pytest.raises(ValueError, match="always, append_if_changed"):
        run([], "x", "sometimes")


def test_arguments_are_written_as_json() -> None:
    (assistant, _) = run([], "x", arguments={"b": [1, 2], "a": "é"})

    arguments = assistant["tool_calls"][0]["function"]["arguments"]
    assert json.loads(arguments) == {"b": [1, 2], "a": "é"}


# --- finding pairs and TTL freshness ---------------------------------------------


def test_find_latest_pair() -> None:
    history = run(run(run([USER_1], "A"), "B"), "A")

    latest = find_latest_pair(history, tool_name=TOOL, arguments=ARGS)

    assert latest == SyntheticPair(5, 0, 6, expected_id("A", suffix="_n_1"))
    assert find_latest_pair(history, tool_name=TOOL, arguments={"k": 2}) is None
    assert find_latest_pair([], tool_name=TOOL, arguments=ARGS) is None


def test_ttl_fresh_while_the_expiry_is_in_the_future() -> None:
    history = run([USER_1], "x", ttl_expiry=NOW + 60)

    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=NOW) is True
    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=NOW + 59.9) is True


def test_ttl_expired_at_and_after_the_expiry() -> None:
    history = run([USER_1], "x", ttl_expiry=NOW + 60)

    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=NOW + 60) is False
    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=NOW + 61) is False


def test_no_pair_counts_as_expired() -> None:
    assert ttl_is_fresh([USER_1], tool_name=TOOL, arguments=ARGS, now=NOW) is False


def test_an_id_without_a_ttl_counts_as_expired() -> None:
    history = run([USER_1], "x")

    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=0) is False


@pytest.mark.parametrize("suffix", ["_ttl_zzzzzzzz", "_ttl_", "_ttl_12-45678", "_ttl_FFFFFFFF"])
def test_an_unparsable_ttl_counts_as_expired(suffix: str) -> None:
    history = [USER_1, *pair(expected_id("x", suffix=suffix), "x")]

    assert ttl_is_fresh(history, tool_name=TOOL, arguments=ARGS, now=0) is False


def test_only_the_latest_pair_decides_freshness() -> None:
    fresh_then_stale = run(run([USER_1], "A", ttl_expiry=NOW + 60), "B", ttl_expiry=NOW - 60)
    stale_then_fresh = run(run([USER_1], "A", ttl_expiry=NOW - 60), "B", ttl_expiry=NOW + 60)

    assert ttl_is_fresh(fresh_then_stale, tool_name=TOOL, arguments=ARGS, now=NOW) is False
    assert ttl_is_fresh(stale_then_fresh, tool_name=TOOL, arguments=ARGS, now=NOW) is True


def test_freshness_is_per_arguments() -> None:
    history = run([USER_1], "x", ttl_expiry=NOW + 60)

    assert ttl_is_fresh(history, tool_name=TOOL, arguments={"k": 2}, now=NOW) is False
