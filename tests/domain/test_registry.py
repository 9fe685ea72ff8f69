"""Group and state filtering, lookups and transitions (docs/groups-and-states.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from toolbus.application.live.config_files import load_registry_from_path
from toolbus.domain.config.descriptors import BUILTIN_TOOL_TYPES, ServiceDescriptor, ToolDescriptor
from toolbus.domain.config.loading import load_registry
from toolbus.domain.config.registry import (
    MAX_CACHED_SELECTIONS,
    Registry,
    ServiceNotConfigured,
    normalize_groups,
    normalize_state,
)
from toolbus.domain.errors import UnknownTool

WORKFLOW = Path(__file__).parent.parent / "data" / "workflow.json"
SERVICE = {
    "request-queue": "non-persistent://tg/request/s",
    "response-queue": "non-persistent://tg/response/s",
}


def registry_of(**tools: dict[str, Any]) -> Registry:
    """A registry whose tools are ``name=fields``, each a tool-service tool of service 's'."""
    base = {"type": "tool-service", "description": "d", "service": "s"}
    return load_registry(
        {
            "tool-service": {"s": SERVICE},
            "tool": {name: base | {"name": name} | fields for name, fields in tools.items()},
        }
    )


def names(tools: tuple[ToolDescriptor, ...]) -> list[str]:
    return [t.name for t in tools]


@pytest.fixture(scope="module")
def workflow() -> Registry:
    return load_registry_from_path(WORKFLOW)


# --------------------------------------------------------------------------- the spec's workflow


@pytest.mark.parametrize(
    ("groups", "state", "available", "by_group", "by_state"),
    [
        (
            ["read-only", "knowledge"],
            "undefined",
            ["knowledge-query", "text-completion"],
            ["complex-analysis", "reset-workflow"],
            ["graph-update"],
        ),
        (
            ["advanced", "compute", "write"],
            "analysis",
            ["graph-update", "complex-analysis"],
            ["knowledge-query", "text-completion", "reset-workflow"],
            [],
        ),
        (
            ["admin"],
            "results",
            ["reset-workflow"],
            ["knowledge-query", "text-completion", "complex-analysis"],
            ["graph-update"],
        ),
    ],
)
def test_the_workflow_example(
    workflow: Registry,
    groups: list[str],
    state: str,
    available: list[str],
    by_group: list[str],
    by_state: list[str],
) -> None:
    result = workflow.availability(groups, state)

    assert names(result.available) == available
    assert list(result.filtered_by_group) == by_group
    assert list(result.filtered_by_state) == by_state


def test_the_workflow_moves_through_its_states(workflow: Registry) -> None:
    state = "undefined"
    for tool in ["knowledge-query", "complex-analysis", "reset-workflow"]:
        assert workflow.is_available(tool, ["*"], state)
        state = workflow.next_state(tool, state)
    assert state == "undefined"


# --------------------------------------------------------------------------- groups


def test_absent_groups_mean_the_default_group() -> None:
    registry = registry_of(plain={}, tagged={"group": ["admin"]}, also={"group": ["default"]})

    assert names(registry.available(None, None)) == ["plain", "also"]


def test_an_empty_group_list_offers_no_tools() -> None:
    registry = registry_of(plain={}, tagged={"group": ["admin"]}, none={"group": []})

    assert registry.available([], None) == ()
    assert set(registry.availability([], None).filtered_by_group) == {"plain", "tagged", "none"}


def test_absent_and_empty_groups_are_cached_apart() -> None:
    registry = registry_of(plain={})

    assert names(registry.available(None, None)) == ["plain"]
    assert registry.available([], None) == ()
    assert names(registry.available(None, None)) == ["plain"]


def test_a_tool_in_any_requested_group_is_offered() -> None:
    registry = registry_of(a={"group": ["x", "y"]}, b={"group": ["z"]}, c={"group": ["w"]})

    assert names(registry.available(["y", "z"], None)) == ["a", "b"]


def test_the_wildcard_in_requested_groups_offers_every_tool() -> None:
    registry = registry_of(a={"group": ["x"]}, b={}, c={"group": []})

    assert names(registry.available(["*"], None)) == ["a", "b", "c"]
    assert names(registry.available(["nothing", "*"], None)) == ["a", "b", "c"]


def test_a_tool_without_groups_is_reachable_only_through_the_wildcard() -> None:
    registry = registry_of(hidden={"group": []})

    assert registry.available(None, None) == ()
    assert registry.available(["default"], None) == ()
    assert names(registry.available(["*"], None)) == ["hidden"]


def test_group_names_are_case_sensitive() -> None:
    registry = registry_of(a={"group": ["Admin"]})

    assert registry.available(["admin"], None) == ()
    assert names(registry.available(["Admin"], None)) == ["a"]


def test_the_order_of_requested_groups_does_not_matter() -> None:
    registry = registry_of(a={"group": ["x"]}, b={"group": ["y"]}, c={"group": ["z"]})

    assert names(registry.available(["x", "y"], None)) == ["a", "b"]
    assert names(registry.available(("y", "x"), None)) == ["a", "b"]


# --------------------------------------------------------------------------- states


def test_absent_and_empty_state_mean_undefined() -> None:
    registry = registry_of(
        start={"applicable-states": ["undefined"]}, later={"available_in_states": ["x"]}
    )

    assert names(registry.available(None, None)) == ["start"]
    assert names(registry.available(None, "")) == ["start"]
    assert names(registry.available(None, "undefined")) == ["start"]
    assert names(registry.available(None, "x")) == ["later"]


def test_a_tool_without_applicable_states_is_offered_in_every_state() -> None:
    registry = registry_of(always={})

    for state in [None, "", "undefined", "analysis", "*"]:
        assert names(registry.available(None, state)) == ["always"]


def test_the_wildcard_in_applicable_states_means_every_state() -> None:
    registry = registry_of(always={"applicable-states": ["*"]})

    assert names(registry.available(None, "anything")) == ["always"]


def test_the_wildcard_is_not_a_wildcard_as_requested_state() -> None:
    registry = registry_of(later={"applicable-states": ["analysis"]})

    assert registry.available(None, "*") == ()


def test_empty_applicable_states_offer_the_tool_in_no_state() -> None:
    registry = registry_of(off={"applicable-states": []})

    assert registry.available(["*"], "undefined") == ()
    assert registry.availability(["*"], "x").filtered_by_state == ("off",)


def test_states_are_case_sensitive() -> None:
    registry = registry_of(a={"applicable-states": ["Analysis"]})

    assert registry.available(None, "analysis") == ()


def test_filtered_tools_are_named_by_reason() -> None:
    registry = registry_of(
        ok={"group": ["g"]},
        wrong_group={"group": ["h"], "applicable-states": ["s"]},
        wrong_state={"group": ["g"], "applicable-states": ["t"]},
    )

    result = registry.availability(["g"], "s")

    assert names(result.available) == ["ok"]
    assert result.filtered_by_group == ("wrong_group",)
    assert result.filtered_by_state == ("wrong_state",)


# --------------------------------------------------------------------------- transitions


def test_a_transition_happens_only_when_the_tool_defines_a_state() -> None:
    registry = registry_of(moves={"state": "analysis"}, stays={}, empty={"state": ""})

    assert registry.next_state("moves", "undefined") == "analysis"
    assert registry.next_state(registry.tool("moves"), "results") == "analysis"
    assert registry.next_state("stays", "research") == "research"
    assert registry.next_state("empty", "research") == "research"


def test_next_state_of_an_unknown_tool_raises() -> None:
    with pytest.raises(UnknownTool):
        registry_of(a={}).next_state("b", "undefined")


# --------------------------------------------------------------------------- caching


def test_results_are_cached_per_groups_and_state() -> None:
    registry = registry_of(a={}, b={"group": ["x"]})

    first = registry.availability(["x"], "s")

    assert registry.availability(["x"], "s") is first
    assert registry.availability(("x",), "s") is first
    assert registry.availability(["x"], "t") is not first
    assert registry.available(None, None) is registry.available(["default"], "undefined")


def test_the_cache_is_bounded_and_stays_correct() -> None:
    registry = registry_of(a={"applicable-states": ["s0"]})
    first = registry.availability(None, "s0")

    for i in range(1, MAX_CACHED_SELECTIONS + 1):
        registry.availability(None, f"s{i}")
    again = registry.availability(None, "s0")

    assert again is not first  # evicted, so computed afresh
    assert again == first


def test_a_new_snapshot_gets_a_fresh_cache() -> None:
    old = registry_of(a={})
    old.available(None, None)
    new = registry_of(a={}, b={})

    assert names(new.available(None, None)) == ["a", "b"]
    assert names(old.available(None, None)) == ["a"]


# --------------------------------------------------------------------------- lookups


def test_tools_are_found_by_name_or_llm_name() -> None:
    registry = registry_of(**{"Tell a joke": {}})

    assert registry.tool("Tell a joke") is registry.tool("Tell_a_joke")
    assert registry.is_available("Tell_a_joke", None, None)


def test_an_unknown_tool_suggests_close_names(workflow: Registry) -> None:
    with pytest.raises(UnknownTool, match="did you mean 'knowledge-query'"):
        workflow.tool("knowledge-qeury")


def test_an_unknown_tool_lists_the_tools_when_nothing_is_close(workflow: Registry) -> None:
    with pytest.raises(UnknownTool, match="configured tools: 'knowledge-query'"):
        workflow.tool("zzz")


def test_an_unknown_tool_in_an_empty_registry_says_so() -> None:
    with pytest.raises(UnknownTool, match="no tools are configured"):
        load_registry({}).tool("any")


def test_is_available_answers_false_for_unknown_tools(workflow: Registry) -> None:
    assert workflow.is_available("knowledge-query", ["knowledge"], None)
    assert not workflow.is_available("knowledge-query", ["knowledge"], "analysis")
    assert not workflow.is_available("knowledge-query", ["admin"], None)
    assert not workflow.is_available("nope", ["*"], None)


def test_service_for_finds_the_tool_service(workflow: Registry) -> None:
    service = workflow.service_for(workflow.tool("knowledge-query"))

    assert service.id == "knowledge-service"
    assert service.request_queue == "non-persistent://tg/request/knowledge"


def test_service_for_a_tool_without_a_service_raises() -> None:
    registry = load_registry(
        {"tool": {"w": {"type": "web", "name": "w", "description": "d"}}},
        tool_types=BUILTIN_TOOL_TYPES | {"web"},
    )

    with pytest.raises(ServiceNotConfigured, match="not backed by a tool service"):
        registry.service_for(registry.tool("w"))


def test_service_for_a_service_from_another_snapshot_raises(workflow: Registry) -> None:
    stranger = ToolDescriptor(key="x", type="tool-service", name="x", description="d", service="y")

    with pytest.raises(ServiceNotConfigured, match="tool-service 'y'"):
        workflow.service_for(stranger)


def test_groups_lists_every_group_with_its_tools() -> None:
    registry = registry_of(a={"group": ["x", "y"]}, b={}, c={"group": ["x", "x"]}, d={"group": []})

    groups = registry.groups()

    assert list(groups) == ["default", "x", "y"]
    assert names(groups["x"]) == ["a", "c"]
    assert names(groups["y"]) == ["a"]
    assert names(groups["default"]) == ["b"]


def test_the_registry_is_read_only(workflow: Registry) -> None:
    with pytest.raises(TypeError):
        workflow.tools["new"] = workflow.tool("knowledge-query")  # type: ignore[index]
    with pytest.raises(TypeError):
        workflow.services["new"] = workflow.services["graph-service"]  # type: ignore[index]
    with pytest.raises(TypeError):
        workflow.snapshot["tool"] = {}  # type: ignore[index]
    with pytest.raises(AttributeError):
        workflow.tools = {}  # type: ignore[misc]


def test_building_a_registry_with_duplicate_names_is_refused() -> None:
    tool = ToolDescriptor(key="a", type="t", name="a", description="d")
    clash = ToolDescriptor(key="b", type="t", name="a", description="d")

    with pytest.raises(ValueError, match="load_registry"):
        Registry({}, [tool, clash])


def test_a_registry_can_be_built_from_descriptors() -> None:
    service = ServiceDescriptor("s", "q-req", "q-resp")
    tool = ToolDescriptor(key="a", type="tool-service", name="a", description="d", service="s")

    registry = Registry({"s": service}, [tool])

    assert registry.service_for(tool) is service
    assert registry.available(None, None) == (tool,)


# --------------------------------------------------------------------------- normalising


@pytest.mark.parametrize(
    ("groups", "expected"),
    [(None, ("default",)), ([], ()), (["a", "b"], ("a", "b")), (("*",), ("*",))],
)
def test_normalize_groups(groups: list[str] | None, expected: tuple[str, ...]) -> None:
    assert normalize_groups(groups) == expected


def test_normalize_groups_refuses_a_bare_string() -> None:
    with pytest.raises(TypeError, match="not the string 'admin'"):
        normalize_groups("admin")


def test_normalize_groups_refuses_non_string_names() -> None:
    with pytest.raises(TypeError, match="must be strings"):
        normalize_groups([1])  # type: ignore[list-item]


@pytest.mark.parametrize(
    ("state", "expected"), [(None, "undefined"), ("", "undefined"), ("analysis", "analysis")]
)
def test_normalize_state(state: str | None, expected: str) -> None:
    assert normalize_state(state) == expected
