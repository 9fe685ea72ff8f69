"""The state workflow of a configuration as a graph, and that graph drawn as SVG.

States are nodes; a tool that moves the state (it has a ``state``) is an edge
from each state it is offered in to the state it leads to. A tool offered in
every state starts from the "any state" node. Tools between the same two
states share one edge, labelled with the first name and how many more, so a
configuration with a thousand tools still draws a readable picture; the full
list is the edge's tooltip. Tools that leave the state as it is are counted on
their node.

Layout is deliberately simple: states in columns by their distance from the
initial state ``undefined``, in configuration order within a column.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from html import escape

from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import UNDEFINED_STATE, WILDCARD

#: The pseudo-state of tools offered in every state.
ANY_STATE = "*"

_COLUMN = 260
_ROW = 86
_NODE_W = 150
_NODE_H = 40
_MARGIN = 30
_LABEL_CHARS = 22
_LABEL_PLACES = (0.5, 0.3, 0.7)
_TOOLTIP_NAMES = 40


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    tools: tuple[str, ...]

    @property
    def label(self) -> str:
        first = self.tools[0]
        if len(first) > _LABEL_CHARS:
            first = first[: _LABEL_CHARS - 1] + "…"
        return first if len(self.tools) == 1 else f"{first} +{len(self.tools) - 1}"


@dataclass(frozen=True, slots=True)
class Workflow:
    """States (in layout order, with their column) and the transitions between them."""

    states: tuple[str, ...]
    columns: dict[str, int] = field(hash=False)
    edges: tuple[Edge, ...]
    #: Tools offered in a state that do not change it, per state (or ANY_STATE).
    staying: dict[str, int] = field(hash=False)


def build_workflow(tools: Iterable[ToolDescriptor]) -> Workflow:
    """The workflow graph of ``tools`` (a registry's tools, in configuration order)."""
    order: dict[str, None] = {UNDEFINED_STATE: None}
    moves: dict[tuple[str, str], list[str]] = defaultdict(list)
    staying: dict[str, int] = defaultdict(int)
    for tool in tools:
        sources = _sources(tool)
        for source in sources:
            order.setdefault(source, None)
        if tool.state is None:
            for source in sources:
                staying[source] += 1
            continue
        order.setdefault(tool.state, None)
        for source in sources:
            moves[(source, tool.state)].append(tool.name)
    edges = tuple(Edge(s, t, tuple(names)) for (s, t), names in moves.items())
    columns = _columns(list(order), edges)
    states = tuple(sorted(order, key=lambda state: columns[state]))
    return Workflow(states, columns, edges, dict(staying))


def render_svg(workflow: Workflow) -> str:
    """The workflow as a self-contained SVG element (no scripts, text escaped)."""
    rows: dict[int, int] = defaultdict(int)
    position: dict[str, tuple[int, int]] = {}
    for state in workflow.states:
        column = workflow.columns[state]
        position[state] = (_MARGIN + column * _COLUMN, _MARGIN + rows[column] * _ROW)
        rows[column] += 1
    width, height = _size(workflow, position, max(rows.values(), default=1))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow" role="img" '
        f'aria-label="state workflow: {len(workflow.states)} states, '
        f'{len(workflow.edges)} transitions" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    leaving: dict[str, int] = defaultdict(int)
    for edge in workflow.edges:
        # Labels of edges leaving one node sit at different points along them, so
        # that edges crossing near their middles do not stack their labels.
        nth = leaving[edge.source]
        leaving[edge.source] += 1
        parts.append(_edge(edge, position, _LABEL_PLACES[nth % len(_LABEL_PLACES)]))
    for state in workflow.states:
        parts.append(_node(state, position[state], workflow.staying.get(state, 0)))
    parts.append("</svg>")
    return "\n".join(parts)


def _size(workflow: Workflow, position: dict[str, tuple[int, int]], rows: int) -> tuple[int, int]:
    """Width and height that hold the drawing and a margin, no more: room to the right
    only for loops and bends within a column, below only for stay counts and arcs back."""
    right = _MARGIN + max(workflow.columns.values(), default=0) * _COLUMN + _NODE_W
    bottom = _MARGIN + (rows - 1) * _ROW + _NODE_H
    bulging = any(
        position[e.source][0] == position[e.target][0] for e in workflow.edges
    )  # loops and edges within a column leave a node's right side and come back
    backwards = any(position[e.target][0] < position[e.source][0] for e in workflow.edges)
    width = right + (90 if bulging else 0) + _MARGIN
    height = bottom + (16 if workflow.staying else 0) + (45 if backwards else 0) + _MARGIN
    return width, height


def _sources(tool: ToolDescriptor) -> tuple[str, ...]:
    states = tool.applicable_states
    if states is None or WILDCARD in states:
        return (ANY_STATE,)
    return states


def _columns(states: list[str], edges: tuple[Edge, ...]) -> dict[str, int]:
    following: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        # "Any state" includes the initial one, so its targets are a step from the start.
        source = UNDEFINED_STATE if edge.source == ANY_STATE else edge.source
        following[source].append(edge.target)
    columns = {UNDEFINED_STATE: 0}
    queue = deque([UNDEFINED_STATE])
    while queue:
        state = queue.popleft()
        for target in following[state]:
            if target not in columns:
                columns[target] = columns[state] + 1
                queue.append(target)
    reached = max(columns.values()) if columns else 0
    for state in states:
        if state == ANY_STATE:
            continue
        if state not in columns:
            # Not reachable from the start by named transitions: one column after the rest.
            columns[state] = reached + 1
    if ANY_STATE in states:
        columns[ANY_STATE] = 0
    return columns


def _node(state: str, at: tuple[int, int], staying: int) -> str:
    x, y = at
    shown = "any state" if state == ANY_STATE else state
    kind = "any" if state == ANY_STATE else ("initial" if state == UNDEFINED_STATE else "state")
    if len(shown) > _LABEL_CHARS:
        shown = shown[: _LABEL_CHARS - 1] + "…"
    stay = (
        f'<text x="{x + _NODE_W // 2}" y="{y + _NODE_H + 13}" class="stay" '
        f'text-anchor="middle">{"1 tool stays" if staying == 1 else f"{staying} tools stay"}</text>'
        if staying
        else ""
    )
    return (
        f'<g class="node {kind}" data-state="{escape(state)}"><title>{escape(state)}</title>'
        f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="8"/>'
        f'<text x="{x + _NODE_W // 2}" y="{y + _NODE_H // 2 + 5}" text-anchor="middle">'
        f"{escape(shown)}</text>{stay}</g>"
    )


def _edge(edge: Edge, position: dict[str, tuple[int, int]], place: float) -> str:
    sx, sy = position[edge.source]
    tx, ty = position[edge.target]
    names = list(edge.tools[:_TOOLTIP_NAMES])
    if len(edge.tools) > _TOOLTIP_NAMES:
        names.append(f"and {len(edge.tools) - _TOOLTIP_NAMES} more")
    title = escape(f"{edge.source} → {edge.target}: " + ", ".join(names))
    right, middle, bottom = sx + _NODE_W, sy + _NODE_H // 2, sy + _NODE_H
    if edge.source == edge.target:
        start = (right - 20, sy)
        curve = ((right + 20, sy - 45), (right + 50, sy + 5), (right, sy + 15))
    elif tx == sx:
        # Within a column: out of the right side and back in, bulging to the right.
        bulge = right + 40 + min(abs(ty - sy) // 4, 40)
        start = (right, middle)
        curve = ((bulge, middle), (bulge, ty + _NODE_H // 2), (tx + _NODE_W, ty + _NODE_H // 2))
    elif tx < sx:
        # Backwards: leave from the bottom and arc below both.
        bend = max(bottom, ty + _NODE_H) + 45
        start = (sx + _NODE_W // 2, bottom)
        curve = ((start[0], bend), (tx + _NODE_W // 2, bend), (tx + _NODE_W // 2, ty + _NODE_H))
    else:
        mid = (right + tx) // 2
        start = (right, middle)
        curve = ((mid, middle), (mid, ty + _NODE_H // 2), (tx, ty + _NODE_H // 2))
    path = "M{},{} C{},{} {},{} {},{}".format(*start, *curve[0], *curve[1], *curve[2])
    lx, ly = _point(place, start, *curve)
    return (
        f'<g class="edge" data-source="{escape(edge.source)}" data-target="{escape(edge.target)}">'
        f"<title>{title}</title>"
        f'<path d="{path}" fill="none" stroke="#555" marker-end="url(#arrow)"/>'
        f'<text x="{lx:.0f}" y="{ly - 4:.0f}" text-anchor="middle" class="edge-label">'
        f"{escape(edge.label)}</text></g>"
    )


def _point(t: float, *points: tuple[int, int]) -> tuple[float, float]:
    """The point at ``t`` on the cubic Bézier curve through ``points``."""
    p0, p1, p2, p3 = points
    a, b, c, d = (1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t**2, t**3
    return (
        a * p0[0] + b * p1[0] + c * p2[0] + d * p3[0],
        a * p0[1] + b * p1[1] + c * p2[1] + d * p3[1],
    )
