"""Properties of :func:`inject` over generated chat histories and hook runs."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from toolbus.domain.hooks.injection import InjectionFrequency, inject, ttl_is_fresh

TOOLS = ("memory_get", "prefs")
ARGUMENTS: tuple[dict[str, Any], ...] = ({}, {"k": 1}, {"user": "ann", "k": 1})
CONTENTS = ("A", "B", "", "ünïcode")
NOW = 1_700_000_000

# The machine may be busy with broker tests; a slow example is not a wrong one.
no_deadline = settings(deadline=None)


@st.composite
def histories(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Well-formed histories: text turns and (multi-)call pairs with unique foreign ids."""
    history: list[dict[str, Any]] = []
    if draw(st.booleans()):
        history.append({"role": "system", "content": "sys"})
    next_id = 0
    for turn in draw(st.lists(st.sampled_from(["user", "assistant", "calls"]), max_size=12)):
        if turn != "calls":
            history.append({"role": turn, "content": draw(st.text(max_size=5))})
            continue
        count = draw(st.integers(1, 3))
        ids = [f"call_{next_id + i}" for i in range(count)]
        next_id += count
        calls = [
            {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
        ]
        history.append({"role": "assistant", "content": None, "tool_calls": calls})
        history += [{"role": "tool", "tool_call_id": i, "content": "out"} for i in ids]
    return history


operations = st.fixed_dictionaries(
    {
        "tool_name": st.sampled_from(TOOLS),
        "arguments": st.sampled_from(ARGUMENTS),
        "content": st.sampled_from(CONTENTS),
        "frequency": st.sampled_from(["always", "append_if_changed"]),
        "ttl_expiry": st.one_of(st.none(), st.integers(NOW - 2, NOW + 2)),
    }
)


def assert_well_formed(messages: Sequence[Mapping[str, Any]]) -> None:
    """Every call is answered by exactly one later tool message, and nothing else is."""
    call_positions: dict[str, int] = {}
    for index, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            assert call["id"] not in call_positions, f"duplicate call id {call['id']}"
            call_positions[call["id"]] = index
    answers = Counter(m["tool_call_id"] for m in messages if m["role"] == "tool")
    assert answers == Counter(call_positions.keys())  # each call once, no stray answers
    for index, message in enumerate(messages):
        if message["role"] == "tool":
            assert call_positions[message["tool_call_id"]] < index


@no_deadline
@given(histories(), st.lists(operations, min_size=1, max_size=8))
def test_input_is_never_mutated(history: list[dict[str, Any]], ops: list[dict[str, Any]]) -> None:
    messages = history
    for op in ops:
        before = copy.deepcopy(messages)
        result = inject(messages, **op)
        assert messages == before
        assert result is not messages
        messages = result


@no_deadline
@given(histories(), st.lists(operations, min_size=1, max_size=8))
def test_every_call_is_matched_by_exactly_one_tool_message(
    history: list[dict[str, Any]], ops: list[dict[str, Any]]
) -> None:
    messages = history
    for op in ops:
        messages = inject(messages, **op)
        assert_well_formed(messages)


@no_deadline
@given(histories(), st.lists(operations, max_size=6), operations)
def test_append_if_changed_with_the_same_content_is_idempotent(
    history: list[dict[str, Any]], earlier: list[dict[str, Any]], op: dict[str, Any]
) -> None:
    messages = history
    for earlier_op in earlier:
        messages = inject(messages, **earlier_op)
    op = {**op, "frequency": "append_if_changed"}

    once = inject(messages, **op)
    twice = inject(once, **op)

    assert len(twice) == len(once)
    assert twice == once


@no_deadline
@given(histories(), st.lists(operations, max_size=6), operations)
def test_each_run_adds_one_pair_or_replaces_one(
    history: list[dict[str, Any]], earlier: list[dict[str, Any]], op: dict[str, Any]
) -> None:
    messages = history
    for earlier_op in earlier:
        messages = inject(messages, **earlier_op)

    result = inject(messages, **op)

    frequency: InjectionFrequency = op["frequency"]
    if frequency == "always":
        assert len(result) == len(messages) + 2
        assert result[: len(messages)] == messages
    else:
        assert len(result) in (len(messages), len(messages) + 2)


@no_deadline
@given(histories(), st.lists(operations, max_size=6), operations, st.integers(NOW - 3, NOW + 3))
def test_the_pair_just_injected_decides_freshness(
    history: list[dict[str, Any]], earlier: list[dict[str, Any]], op: dict[str, Any], now: int
) -> None:
    messages = history
    for earlier_op in earlier:
        messages = inject(messages, **earlier_op)

    result = inject(messages, **op)

    fresh = ttl_is_fresh(result, tool_name=op["tool_name"], arguments=op["arguments"], now=now)
    assert fresh is (op["ttl_expiry"] is not None and op["ttl_expiry"] > now)
