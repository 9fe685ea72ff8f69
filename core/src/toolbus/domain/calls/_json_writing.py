"""JSON text written exactly as Python's ``json.dumps`` writes it, faster when long.

The wire carries JSON inside JSON (a request's arguments are a JSON string in
the body), so a long argument or answer is escaped two or three times per call,
and Python's own escaper runs at a few hundred MB/s. orjson escapes the same
strings several times faster. The two agree byte for byte on ASCII text except
for one character: ``json.dumps`` escapes DEL (``\\x7f``) and orjson does not.
So orjson takes long ASCII strings without DEL, and everything else (short
strings, where calling orjson costs more than it saves, and non-ASCII text,
which ``json.dumps`` writes as ``\\u`` escapes and orjson as UTF-8) stays with
Python's escaper. The output is the same either way; only the speed differs.
"""

from __future__ import annotations

import json
import json.encoder
from collections.abc import Callable
from typing import Any

import orjson

#: Python's own escaper (in C): a string quoted as ``json.dumps`` quotes it.
quote_with_json: Callable[[str], str] = json.encoder.encode_basestring_ascii

#: From this length on, orjson's escaper is faster than Python's, even counting
#: the decoding of its bytes back to text (measured: equal at about 64
#: characters, twice as fast at 1,000, eight times at 1 MB).
LONG_TEXT = 256

_orjson_dumps = orjson.dumps


def quote(text: str) -> str:
    """``text`` as a JSON string literal, exactly as ``json.dumps(text)`` writes it."""
    if len(text) < LONG_TEXT or not text.isascii() or "\x7f" in text:
        return quote_with_json(text)
    return _orjson_dumps(text).decode("ascii")


def _object_chunks(quote_string: Callable[[str], str]) -> Callable[[dict[str, Any], int], Any]:
    """What ``json.dumps`` writes for a dict, as chunks, minus its per-call set-up.

    ``JSONEncoder.encode`` builds a new C encoder on every call; this builds one
    once. Without circular-reference markers (shared markers would go stale
    after an error): a cycle ends in RecursionError instead.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the C accelerator
        encode = json.JSONEncoder().encode
        return lambda value, _level: (encode(value),)
    default = json.JSONEncoder().default
    return make(None, default, quote_string, None, ": ", ", ", False, False, True)  # type: ignore[no-any-return]


_plain_chunks = _object_chunks(quote_with_json)
_quick_chunks = _object_chunks(quote)


def encode_object(value: dict[str, Any]) -> str:
    """``json.dumps(value)`` for a dict (TypeError, ValueError or RecursionError when
    it cannot be encoded), faster when one of its values is a long string.

    Only the top level is looked at: that is where a tool's long text usually
    is (``{"text": ...}``), and calling :func:`quote` for every string costs a
    small object more than it saves. A long string deeper down is still
    written correctly, by Python's escaper.
    """
    for item in value.values():
        if item.__class__ is str and len(item) >= LONG_TEXT:
            return "".join(_quick_chunks(value, 0))
    return "".join(_plain_chunks(value, 0))
