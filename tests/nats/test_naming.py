"""Queue names onto subjects, streams and consumers (no server needed)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from toolbus.domain.calls.queues import parse_queue
from toolbus_nats import consumer_name, dead_letter_subject, stream_name, subject_for


def test_subjects_are_the_dotted_queue_names() -> None:
    assert subject_for(parse_queue("non-persistent://tg/request/joke")) == "tg.request.joke"
    assert subject_for(parse_queue("persistent://tg/request/joke")) == "tg.request.joke"
    assert subject_for(parse_queue("plain.name")) == "plain.name"


def test_stream_names_are_readable_in_the_common_case() -> None:
    assert stream_name("tg.request.joke") == "TOOLBUS_tg_request_joke"
    assert stream_name("tg.request.my-tool") == "TOOLBUS_tg_request_my--tool"
    assert stream_name(dead_letter_subject("tg.request.joke")) == "TOOLBUS_tg_request_joke_dlq"


def test_stream_names_do_not_collide_where_a_plain_replacement_would() -> None:
    assert stream_name("a_b.c") != stream_name("a.b_c")
    assert stream_name("a-.b") != stream_name("a.-b")


segment = st.text(alphabet="ab_-", min_size=1, max_size=4)
subjects = st.lists(segment, min_size=1, max_size=4).map(".".join)


@given(subjects, subjects)
def test_different_subjects_get_different_streams(first: str, second: str) -> None:
    if first != second:
        assert stream_name(first) != stream_name(second)


def test_very_long_subjects_get_hashed_stream_names_that_nats_accepts() -> None:
    long_a, long_b = "t.n." + "a" * 240, "t.n." + "a" * 239 + "b"
    assert stream_name(long_a) != stream_name(long_b)
    for name in (stream_name(long_a), stream_name(long_b)):
        assert len(name) <= 255 and not set(name) & set(" .*>/\\")


def test_consumer_names_are_the_group_when_nats_allows_it() -> None:
    assert consumer_name("joke-service") == "joke-service"
    hashed = consumer_name("com.example tools")
    assert hashed.startswith("toolbus-") and not set(hashed) & set(" .*>/\\")
    assert hashed != consumer_name("com.example.tools")
