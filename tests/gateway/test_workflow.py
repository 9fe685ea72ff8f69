"""The workflow diagram: states, transitions grouped per pair, and text that cannot escape."""

from __future__ import annotations

import re
from typing import Any

import pytest

from toolbus.domain.config.loading import load_registry
from toolbus_gateway.workflow import ANY_STATE, build_workflow, render_svg


def registry(tools: dict[str, dict[str, Any]]) -> Any:
    service = {"id": "s", "request-queue": "q-req", "response-queue": "q-res"}
    entries = {
        key: {"type": "tool-service", "name": key, "description": key, "service": "s", **extra}
        for key, extra in tools.items()
    }
    return load_registry({"tool-service": {"s": service}, "tool": entries})


def test_transitions_are_edges_between_states_grouped_per_pair() -> None:
    tools = {
        "start": {"state": "a"},
        **{f"go-{n}": {"applicable-states": ["a"], "state": "b"} for n in range(30)},
        "back": {"applicable-states": ["b"], "state": "a"},
        "look": {},
        "peek": {"applicable-states": ["b"]},
    }
    workflow = build_workflow(registry(tools).tools.values())
    edges = {(e.source, e.target): e for e in workflow.edges}
    assert set(edges) == {(ANY_STATE, "a"), ("a", "b"), ("b", "a")}
    assert edges[("a", "b")].label == "go-0 +29"
    assert workflow.columns["undefined"] == 0 and workflow.columns["a"] == 1
    assert workflow.columns["b"] == 2
    assert workflow.staying == {ANY_STATE: 1, "b": 1}


def test_names_are_escaped_in_the_drawing() -> None:
    tools = {"x": {"state": "<script>alert(1)</script>"}}
    svg = render_svg(build_workflow(registry(tools).tools.values()))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    assert svg.startswith("<svg") and svg.endswith("</svg>")


def test_a_thousand_tools_draw_a_bounded_picture() -> None:
    tools = {
        f"t{n}": {"applicable-states": [f"s{n % 10}"], "state": f"s{(n + 1) % 10}"}
        for n in range(1000)
    }
    svg = render_svg(build_workflow(registry(tools).tools.values()))
    assert svg.count('class="edge"') == 10
    assert len(svg) < 50_000


def _drawn_size(svg: str) -> tuple[int, int]:
    found = re.search(r'width="(\d+)" height="(\d+)"', svg)
    assert found is not None
    return int(found.group(1)), int(found.group(2))


def _extent(svg: str) -> tuple[int, int]:
    """The rightmost and lowest points of the nodes and their texts."""
    rects = [(int(x) + int(w), int(y) + int(h)) for x, y, w, h in RECT.findall(svg)]
    texts = [int(y) for y in re.findall(r'<text x="\d+" y="(\d+)"', svg)]
    return max(r for r, _ in rects), max([b for _, b in rects] + texts)


RECT = re.compile(r'<rect x="(\d+)" y="(\d+)" width="(\d+)" height="(\d+)"')


@pytest.mark.parametrize(
    "tools",
    [
        {"look": {}},  # the start state alone, with a tool offered everywhere
        {
            "look": {},
            "peek": {},
            "start": {"state": "a"},
            "go": {"applicable-states": ["a"], "state": "b"},
        },
    ],
    ids=["no-transitions", "forward-only"],
)
def test_the_picture_is_as_large_as_what_it_draws_and_a_margin(
    tools: dict[str, dict[str, Any]],
) -> None:
    svg = render_svg(build_workflow(registry(tools).tools.values()))
    width, height = _drawn_size(svg)
    right, bottom = _extent(svg)
    assert right < width <= right + 40
    assert bottom < height <= bottom + 40


def test_stay_counts_agree_with_their_verb() -> None:
    one = render_svg(build_workflow(registry({"look": {}}).tools.values()))
    two = render_svg(build_workflow(registry({"look": {}, "peek": {}}).tools.values()))
    assert ">1 tool stays<" in one
    assert ">2 tools stay<" in two
