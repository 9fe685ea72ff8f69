"""The loop's pure parts: what a turn means, when to stop, thought or answer, requests, URLs."""

from __future__ import annotations

import json

import pytest

from toolbus.application.agent.llm_urls import api_key, parse_llm_url
from toolbus.domain.agent.conversation import assistant_message, initial_messages
from toolbus.domain.agent.decisions import (
    Answer,
    CallTools,
    Observed,
    Stop,
    TextRouting,
    after_calls,
    after_turn,
)
from toolbus.domain.agent.turns import ModelTurn, ToolCall, Usage
from toolbus.domain.agent.wire import (
    AgentEvent,
    AgentRequest,
    BadAgentRequest,
    decode_event,
    decode_request,
    encode_event,
)
from toolbus.domain.errors import PluginError
from toolbus_anthropic.messages import to_anthropic

CALL = ToolCall("c1", "knowledge-query", '{"question": "X?"}')


def test_a_turn_without_calls_is_the_answer() -> None:
    assert after_turn(ModelTurn("42"), iteration=1, max_iterations=3) == Answer("42")


def test_a_turn_with_calls_runs_them_unless_it_is_the_last_allowed() -> None:
    turn = ModelTurn("", (CALL,))
    assert after_turn(turn, iteration=2, max_iterations=3) == CallTools((CALL,))
    stop = after_turn(turn, iteration=3, max_iterations=3)
    assert isinstance(stop, Stop) and stop.reason == "max-iterations"
    assert "3 iterations" in stop.message and "Raise max_iterations" in stop.message


def test_only_a_successful_terminate_answers_and_the_first_one_wins() -> None:
    assert after_calls([Observed(True, "a", "suspend"), Observed(False, "b", "terminate")]) is None
    outcomes = [Observed(True, "first", "terminate"), Observed(True, "second", "terminate")]
    assert after_calls(outcomes) == Answer("first")


def test_text_is_held_until_a_tool_call_makes_it_a_thought() -> None:
    routing = TextRouting(hold=10)
    assert routing.text("Let me ") is None
    assert routing.tool_call() == ("thought", "Let me ")
    assert routing.text("more") == ("thought", "more")
    assert routing.end() == ("thought", "")


def test_text_past_the_hold_streams_as_the_answer() -> None:
    routing = TextRouting(hold=5)
    assert routing.text("abc") is None
    assert routing.text("def") == ("answer", "abcdef")
    assert routing.text("g") == ("answer", "g")
    assert routing.tool_call() is None  # already committed: the dialog goes on
    assert routing.end() == ("answer", "")


def test_short_text_of_a_turn_without_calls_is_the_answer_at_the_end() -> None:
    routing = TextRouting()
    assert routing.text("Yes.") is None
    assert routing.end() == ("answer", "Yes.")


def test_usage_adds_up() -> None:
    assert Usage(1, 2) + Usage(3, 4) == Usage(4, 6)
    assert Usage(4, 6).total_tokens == 10


def test_a_trustgraph_request_reads_with_absent_and_empty_groups_distinct() -> None:
    absent = decode_request(b'{"question": "q", "state": "", "history": [], "user": "u"}')
    assert absent.group is None
    empty = decode_request(b'{"question": "q", "group": []}')
    assert empty.group == []
    unknown = decode_request(b'{"question": "q", "plan": "old field", "streaming": true}')
    assert unknown.streaming is True


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"\xff", "is not UTF-8 JSON"),
        (b'"q"', "must be a JSON object, not str"),
        (b'{"question": "  "}', "has no question"),
        (b'{"question": "q", "history": [{"arguments": 3}]}', "history.0.arguments"),
        (b'{"question": "q", "group": [1]}', "group.0"),
    ],
)
def test_an_unreadable_request_says_what_is_wrong(body: bytes, problem: str) -> None:
    with pytest.raises(BadAgentRequest, match=problem.replace(".", r"\.")):
        decode_request(body)


def test_events_round_trip_without_nulls() -> None:
    event = AgentEvent(chunk_type="answer", content="42", end_of_stream=True, state="done")
    data = json.loads(encode_event(event))
    assert "error" not in data and data["end_of_stream"] is True
    assert decode_event(encode_event(event)) == event


def test_history_becomes_calls_and_observations_before_the_question() -> None:
    request = AgentRequest.model_validate(
        {
            "question": "Next?",
            "history": [
                {"thought": "t", "action": "a", "arguments": {"x": 1}, "observation": "o"},
                {"thought": "just thinking"},
            ],
        }
    )
    messages = initial_messages(request, "Be brief.")
    assert [m["role"] for m in messages] == ["system", "assistant", "tool", "assistant", "user"]
    assert messages[1]["tool_calls"][0]["function"] == {"name": "a", "arguments": '{"x": 1}'}
    assert messages[2] == {"role": "tool", "tool_call_id": "history-1", "content": "o"}


def test_a_turn_goes_back_into_the_chat_as_an_assistant_message() -> None:
    message = assistant_message(ModelTurn("", (CALL,)))
    assert message["content"] is None
    assert message["tool_calls"][0]["id"] == "c1"
    assert assistant_message(ModelTurn("hi")) == {"role": "assistant", "content": "hi"}


def test_the_chat_becomes_anthropic_messages() -> None:
    system, messages = to_anthropic(
        [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Q"},
            assistant_message(ModelTurn("Looking.", (CALL, ToolCall("c2", "other", "")))),
            {"role": "tool", "tool_call_id": "c1", "content": "obs 1"},
            {"role": "tool", "tool_call_id": "c2", "content": "obs 2"},
        ]
    )
    assert system == "Be brief."
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][1] == {
        "type": "tool_use",
        "id": "c1",
        "name": "knowledge-query",
        "input": {"question": "X?"},
    }
    assert messages[1]["content"][2]["input"] == {}
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["c1", "c2"]


@pytest.mark.parametrize(
    ("url", "model", "base"),
    [
        ("openai://gpt-4.1-mini", "gpt-4.1-mini", None),
        ("openai+http://127.0.0.1:11434/v1/llama3", "llama3", "http://127.0.0.1:11434/v1"),
        ("openai+https://h/v1?model=meta/llama-3", "meta/llama-3", "https://h/v1"),
        ("anthropic+http://127.0.0.1:9/claude-x", "claude-x", "http://127.0.0.1:9"),
    ],
)
def test_llm_urls_name_model_and_base_url(url: str, model: str, base: str | None) -> None:
    location = parse_llm_url(url, {"max_retries": 5})
    assert (location.model, location.base_url) == (model, base)
    assert location.integer("max_retries", 3) == 5


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("openai://", "names no model"),
        ("openai+http://127.0.0.1:1/", "names no model"),
        ("openai+ftp://h/m", "is not supported"),
        ("openai://m?api_key=sk-123", "environment variables only"),
        ("openai://m?max_retries=-1", "whole number"),
        ("openai://m?timeout=0", "positive number"),
        ("openai://m?stream=maybe", "true or false"),
    ],
)
def test_bad_llm_urls_are_refused_with_the_fix(url: str, problem: str) -> None:
    with pytest.raises(PluginError, match=problem) as raised:
        location = parse_llm_url(url, {})
        location.integer("max_retries", 3)
        location.number("timeout", 1.0)
        location.flag("stream", True)
    assert "sk-123" not in str(raised.value)


def test_a_required_key_missing_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MY_KEY", raising=False)
    location = parse_llm_url("openai://m?api_key_env=MY_KEY", {})
    with pytest.raises(PluginError, match="set the environment variable MY_KEY"):
        api_key(location, "OPENAI_API_KEY", required=True)
    assert api_key(location, "OPENAI_API_KEY", required=False) is None
    monkeypatch.setenv("MY_KEY", "k")
    assert api_key(location, "OPENAI_API_KEY", required=True) == "k"
