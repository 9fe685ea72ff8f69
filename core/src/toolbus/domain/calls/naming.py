"""Turning arbitrary tool names into names an LLM function-calling API accepts."""

from __future__ import annotations

import re

MAX_TOOL_NAME = 64
_OUTSIDE = re.compile(r"[^A-Za-z0-9_-]+")


def sanitize_toolname(name: str) -> str:
    """Map ``name`` onto ``^[A-Za-z_][A-Za-z0-9_-]{0,63}$``.

    Every run of characters outside ``[A-Za-z0-9_-]`` becomes one ``_``; a ``_``
    is put in front when the result does not start with a letter or ``_`` (the
    empty string becomes ``"_"``: DIAL's function returns ``""``, which no LLM
    API accepts as a name); the result is cut to 64 characters. The
    function is idempotent: ``sanitize_toolname(sanitize_toolname(x)) ==
    sanitize_toolname(x)``.
    """
    cleaned = _OUTSIDE.sub("_", name)
    if not cleaned or not (cleaned[0].isascii() and (cleaned[0].isalpha() or cleaned[0] == "_")):
        cleaned = "_" + cleaned
    return cleaned[:MAX_TOOL_NAME]
