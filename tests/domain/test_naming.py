"""``sanitize_toolname``: any tool name to a valid LLM function name."""

from __future__ import annotations

import re

import pytest

from toolbus.domain.calls.naming import MAX_TOOL_NAME, sanitize_toolname

VALID = re.compile(r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("tell-joke", "tell-joke"),
        ("Knowledge_Query2", "Knowledge_Query2"),
        ("tell joke", "tell_joke"),
        ("tell   joke", "tell_joke"),
        ("weather/forecast", "weather_forecast"),
        ("a/ b", "a_b"),
        ("v1.2.3", "v1_2_3"),
        ("toolset.tool", "toolset_tool"),
        ("3d-render", "_3d-render"),
        ("-flag", "_-flag"),
        ("_private", "_private"),
        ("café au lait", "caf_au_lait"),
        ("日本語", "_"),
        ("!!!", "_"),
        ("", "_"),
        ("search!", "search_"),
    ],
)
def test_sanitize_toolname(name: str, expected: str) -> None:
    assert sanitize_toolname(name) == expected


def test_long_names_are_cut_to_64_characters() -> None:
    name = "a" * 70

    assert sanitize_toolname(name) == "a" * MAX_TOOL_NAME
    assert MAX_TOOL_NAME == 64


def test_a_prefixed_long_name_is_still_64_characters() -> None:
    result = sanitize_toolname("9" * 70)

    assert result == "_" + "9" * 63


@pytest.mark.parametrize(
    "name", ["tell joke", "3d", "-x", "", "a" * 70, "9" * 70, "x" * 63 + " y", "日本語"]
)
def test_sanitize_toolname_is_idempotent_and_valid(name: str) -> None:
    once = sanitize_toolname(name)

    assert sanitize_toolname(once) == once
    assert VALID.match(once)
