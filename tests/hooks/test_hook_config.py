"""Hook configuration: DIAL manifests parse unchanged, mistakes are all reported at once."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from toolbus.domain.errors import ConfigError, Problem
from toolbus.hooks import ToolCallHook, TTLRefresh, parse_hooks

# Verbatim from the DIAL Quick Apps design ("REST API injection with TTL").
DIAL_TTL_MANIFEST = """
{
  "hooks": [
    {
      "kind": "tool_call",
      "event": "on_request_start",
      "toolset_name": "user_prefs_api",
      "tool_name": "get_preferences",
      "frequency": "append_if_changed",
      "refresh_condition": { "kind": "ttl", "ttl_minutes": 60 }
    }
  ]
}
"""

# The other examples of the same document.
DIAL_EXAMPLES: list[dict[str, Any]] = [
    {
        "kind": "tool_call",
        "event": "on_request_start",
        "toolset_name": "memory_server",
        "tool_name": "get_memories",
        "arguments": {"user_id": "current"},
        "frequency": "always",
    },
    {
        "kind": "tool_call",
        "event": "on_request_start",
        "toolset_name": "user_prefs_api",
        "tool_name": "get_preferences",
        "frequency": "append_if_changed",
    },
    {
        "kind": "tool_call",
        "event": "on_request_start",
        "tool_name": "My_Summarizer_tool",
        "frequency": "always",
    },
]


def hook(**fields: Any) -> dict[str, Any]:
    return {"kind": "tool_call", "event": "on_request_start", "tool_name": "t", **fields}


def problems_of(data: Any) -> tuple[Problem, ...]:
    with pytest.raises(ConfigError) as caught:
        parse_hooks(data)
    return caught.value.problems


# --- parsing ---------------------------------------------------------------------


def test_dial_manifest_with_ttl_parses_unchanged() -> None:
    manifest = json.loads(DIAL_TTL_MANIFEST)

    (parsed,) = parse_hooks(manifest["hooks"])

    assert parsed == ToolCallHook(
        event="on_request_start",
        toolset_name="user_prefs_api",
        tool_name="get_preferences",
        frequency="append_if_changed",
        refresh_condition=TTLRefresh(ttl_minutes=60),
    )
    assert parsed.call_name == "user_prefs_api_get_preferences"
    # Nothing lost or added: dumping gives back what the manifest said.
    assert parsed.model_dump(mode="json", exclude_unset=True) == manifest["hooks"][0]


@pytest.mark.parametrize("example", DIAL_EXAMPLES, ids=lambda e: e["tool_name"])
def test_every_dial_example_parses(example: dict[str, Any]) -> None:
    (parsed,) = parse_hooks([example])

    assert parsed.tool_name == example["tool_name"]
    assert parsed.frequency == example["frequency"]
    assert parsed.arguments == example.get("arguments", {})


def test_a_json_string_of_a_list_is_accepted() -> None:
    hooks_json = json.dumps(json.loads(DIAL_TTL_MANIFEST)["hooks"])

    assert parse_hooks(hooks_json) == parse_hooks(json.loads(hooks_json))


def test_defaults() -> None:
    (parsed,) = parse_hooks([{"kind": "tool_call", "event": "on_request_start", "tool_name": "t"}])

    assert parsed.event == "on_request_start"
    assert parsed.name is None
    assert parsed.toolset_name is None
    assert parsed.arguments == {}
    assert parsed.frequency == "append_if_changed"
    assert parsed.refresh_condition is None
    assert parsed.timeout_seconds is None
    assert parsed.ttl_expiry(1_700_000_000.0) is None


def test_none_and_empty_mean_no_hooks() -> None:
    assert parse_hooks(None) == ()
    assert parse_hooks([]) == ()
    assert parse_hooks("[]") == ()


def test_hooks_are_frozen() -> None:
    (parsed,) = parse_hooks([hook()])

    with pytest.raises(ValidationError):
        parsed.tool_name = "other"


def test_timeout_seconds_accepts_fractions() -> None:
    (parsed,) = parse_hooks([hook(timeout_seconds=2.5)])

    assert parsed.timeout_seconds == 2.5


# --- names -----------------------------------------------------------------------


def test_call_name_with_toolset_is_sanitized() -> None:
    parsed = ToolCallHook(event="on_request_start", toolset_name="user prefs/api", tool_name="get!")

    assert parsed.call_name == "user_prefs_api_get_"


def test_call_name_with_toolset_starting_with_a_digit_gets_a_prefix() -> None:
    parsed = ToolCallHook(event="on_request_start", toolset_name="3d", tool_name="render")

    assert parsed.call_name == "_3d_render"


def test_call_name_without_toolset_is_the_tool_name_verbatim() -> None:
    # DIAL Deployment tools are named exactly; sanitizing could point at another tool.
    assert ToolCallHook(event="on_request_start", tool_name="My_Summarizer_tool").call_name == (
        "My_Summarizer_tool"
    )
    assert ToolCallHook(event="on_request_start", tool_name="odd name").call_name == "odd name"


def test_empty_toolset_name_means_no_toolset() -> None:
    parsed = ToolCallHook(event="on_request_start", toolset_name="", tool_name="get")

    assert parsed.call_name == "get"


def test_display_name_is_name_else_call_name() -> None:
    named = ToolCallHook(event="on_request_start", name="Memories", tool_name="get")
    unnamed = ToolCallHook(event="on_request_start", toolset_name="mem", tool_name="get")

    assert named.display_name == "Memories"
    assert unnamed.display_name == "mem_get"


# --- TTL -------------------------------------------------------------------------


def test_ttl_expiry_is_whole_seconds_from_now() -> None:
    (parsed,) = parse_hooks([hook(refresh_condition={"kind": "ttl", "ttl_minutes": 60})])

    assert parsed.ttl_expiry(1_700_000_000.9) == 1_700_000_000 + 3600


# --- validation ------------------------------------------------------------------


def test_all_problems_of_all_hooks_are_reported_together() -> None:
    problems = problems_of(
        [
            hook(name="late", event="on_completion"),
            hook(name="zero", refresh_condition={"kind": "ttl", "ttl_minutes": 0}),
            {"kind": "webhook", "name": "web", "event": "on_request_start"},
            hook(name="typo", tool_nme="x"),
            hook(name="fine"),
        ]
    )

    assert [(p.where, p.field) for p in problems] == [
        ("hook #0 ('late')", "event"),
        ("hook #1 ('zero')", "refresh_condition.ttl_minutes"),
        ("hook #2 ('web')", "kind"),
        ("hook #3 ('typo')", "tool_nme"),
    ]
    assert "'on_request_start'" in problems[0].message  # lists the supported events
    assert "'on_completion'" in problems[0].message
    assert "greater than 0" in problems[1].message
    assert "'webhook'" in problems[2].message and "'tool_call'" in problems[2].message
    assert "did you mean 'tool_name'?" in problems[3].message


def test_the_error_message_names_each_hook_and_field() -> None:
    with pytest.raises(ConfigError) as caught:
        parse_hooks([hook(name="late", event="on_completion"), hook(tool_name="x", oops=1)])

    text = str(caught.value)
    assert "2 problems" in text
    assert "hook #0 ('late') field 'event'" in text
    assert "hook #1 ('x') field 'oops': unknown key" in text


def test_unnamed_hooks_are_named_by_their_call_name() -> None:
    (problem,) = problems_of([hook(toolset_name="mem", tool_name="get", frequency="daily")])

    assert problem.where == "hook #0 ('mem_get')"
    assert problem.field == "frequency"


def test_a_hook_with_no_name_at_all_is_named_by_index() -> None:
    (problem,) = problems_of([{"kind": "tool_call", "event": "on_request_start"}])

    assert problem == Problem("hook #0", "tool_name", "is required")


def test_missing_kind_lists_the_kinds() -> None:
    (problem,) = problems_of([{"event": "on_request_start", "tool_name": "t"}])

    assert problem.field == "kind"
    assert "'tool_call'" in problem.message


@pytest.mark.parametrize(
    ("refresh", "field", "fragment"),
    [
        ({"kind": "daily"}, "refresh_condition.kind", "'ttl'"),
        ({"ttl_minutes": 5}, "refresh_condition.kind", "'ttl'"),
        ({"kind": "ttl"}, "refresh_condition.ttl_minutes", "required"),
        ({"kind": "ttl", "ttl_minutes": -1}, "refresh_condition.ttl_minutes", "greater than 0"),
        ({"kind": "ttl", "ttl_minutes": True}, "refresh_condition.ttl_minutes", "boolean"),
        ({"kind": "ttl", "ttl_minutes": 1.5}, "refresh_condition.ttl_minutes", "integer"),
        ({"kind": "ttl", "ttl_minutes": 5, "ttl": 1}, "refresh_condition.ttl", "ttl_minutes"),
    ],
)
def test_bad_refresh_conditions(refresh: Any, field: str, fragment: str) -> None:
    (problem,) = problems_of([hook(refresh_condition=refresh)])

    assert problem.field == field
    assert fragment in problem.message


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"timeout_seconds": 0}, "timeout_seconds"),
        ({"timeout_seconds": -3}, "timeout_seconds"),
        ({"timeout_seconds": True}, "timeout_seconds"),
        ({"tool_name": ""}, "tool_name"),
        ({"frequency": "sometimes"}, "frequency"),
        ({"arguments": ["not", "an", "object"]}, "arguments"),
        ({"arguments": {"when": object()}}, "arguments"),
    ],
)
def test_bad_fields(fields: dict[str, Any], field: str) -> None:
    (problem,) = problems_of([hook(**fields)])

    assert problem.field == field


def test_unknown_key_without_a_close_match_lists_the_known_keys() -> None:
    (problem,) = problems_of([hook(colour="blue")])

    assert problem.field == "colour"
    assert "known keys:" in problem.message and "refresh_condition" in problem.message


def test_a_hook_that_is_not_an_object() -> None:
    (problem,) = problems_of([hook(), 5])

    assert problem == Problem("hook #1", "", "must be an object, not int")


@pytest.mark.parametrize("data", [{"kind": "tool_call"}, 5, "{not json"])
def test_hooks_that_are_not_a_list(data: Any) -> None:
    (problem,) = problems_of(data)

    assert problem.where == "hooks"


def test_direct_model_validation_names_the_supported_events() -> None:
    with pytest.raises(ValidationError, match="supported events: 'on_request_start'"):
        ToolCallHook.model_validate(hook(event="on_pre_llm"))
