"""The wire's JSON writer gives exactly ``json.dumps``'s bytes, long strings included.

Long ASCII strings take a faster escaper than Python's; these properties pin
that the bytes never differ, whichever escaper a string takes.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from toolbus.domain.calls._json_writing import LONG_TEXT, encode_object, quote
from toolbus.domain.calls.wire import encode_request, encode_response

# ASCII with every control character and DEL, which the two escapers treat
# differently; most characters printable, as in prose.
ascii_chars = st.characters(max_codepoint=0x7F) | st.sampled_from('"\\\n\t\r\x00\x1f\x7f/ ')
long_ascii = st.text(ascii_chars, min_size=LONG_TEXT, max_size=4 * LONG_TEXT)
# Either side of the length where the escaper changes, and any Unicode at all.
any_text = st.one_of(
    st.text(),
    long_ascii,
    st.text(ascii_chars, min_size=LONG_TEXT - 2, max_size=LONG_TEXT + 2),
    st.text(min_size=LONG_TEXT, max_size=2 * LONG_TEXT),
)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(any_text, children, max_size=3)
    ),
    max_leaves=8,
)


@given(any_text)
def test_a_string_is_quoted_as_json_dumps_quotes_it(text: str) -> None:
    assert quote(text) == json.dumps(text)


@given(long_ascii)
def test_long_ascii_with_del_is_escaped_as_json_dumps_escapes_it(text: str) -> None:
    text = text[: LONG_TEXT // 2] + "\x7f" + text[LONG_TEXT // 2 :]

    assert quote(text) == json.dumps(text)
    assert "\\u007f" in quote(text)


@given(st.dictionaries(any_text, json_values, max_size=4))
def test_an_object_is_encoded_as_json_dumps_encodes_it(value: dict[str, Any]) -> None:
    assert encode_object(value) == json.dumps(value)


@given(user=any_text, arguments=st.dictionaries(any_text, json_values, max_size=3))
def test_a_request_with_long_arguments_has_the_bytes_trustgraph_writes(
    user: str, arguments: dict[str, Any]
) -> None:
    expected = json.dumps({"user": user, "config": "{}", "arguments": json.dumps(arguments)})

    assert encode_request(user, None, arguments) == expected.encode()


@given(any_text)
def test_a_long_answer_has_the_bytes_trustgraph_writes(text: str) -> None:
    expected = json.dumps({"error": None, "response": text, "end_of_stream": True})

    assert encode_response(text) == expected.encode()


def test_a_megabyte_of_prose_is_written_as_json_dumps_writes_it() -> None:
    prose = 'She said "stop"\n\tand left\\ at 5/6. ' * 30_000

    assert quote(prose) == json.dumps(prose)
    assert encode_object({"text": prose}) == json.dumps({"text": prose})
