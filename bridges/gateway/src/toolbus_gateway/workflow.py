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

_COLUMN = 230
_ROW = 86
_NODE_W = 150
_NODE_H = 40
_MARGIN = 30
_LABEL_CHARS = 22
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
    width = _MARGIN * 2 + (max(workflow.columns.values(), default=0)) * _COLUMN + _NODE_W
    height = _MARGIN * 2 + max(rows.values(), default=1) * _ROW
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="workflow" role="img" '
        f'aria-label="state workflow: {len(workflow.states)} states, '
        f'{len(workflow.edges)} transitions" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>',
    ]
    for edge in workflow.edges:
        parts.append(_edge(edge, position))
    for state in workflow.states:
        parts.append(_node(state, position[state], workflow.staying.get(state, 0)))
    parts.append("</svg>")
    return "\n".join(parts)


def _sources(tool: ToolDescriptor) -> tuple[str, ...]:
    states = tool.applicable_states
    if states is None or WILDCARD in states:
        return (ANY_STATE,)
    return states


def _columns(states: list[str], edges: tuple[Edge, ...]) -> dict[str, int]:
    following: dict[str, list[str]] = defaultdict(list)
    for edge in edges:
        if edge.source != ANY_STATE:
            following[edge.source].append(edge.target)
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
        f'text-anchor="middle">{staying} tool{"s" if staying != 1 else ""} stay</text>'
        if staying
        else ""
    )
    return (
        f'<g class="node {kind}" data-state="{escape(state)}"><title>{escape(state)}</title>'
        f'<rect x="{x}" y="{y}" width="{_NODE_W}" height="{_NODE_H}" rx="8"/>'
        f'<text x="{x + _NODE_W // 2}" y="{y + _NODE_H // 2 + 5}" text-anchor="middle">'
        f"{escape(shown)}</text>{stay}</g>"
    )


def _edge(edge: Edge, position: dict[str, tuple[int, int]]) -> str:
    sx, sy = position[edge.source]
    tx, ty = position[edge.target]
    names = list(edge.tools[:_TOOLTIP_NAMES])
    if len(edge.tools) > _TOOLTIP_NAMES:
        names.append(f"and {len(edge.tools) - _TOOLTIP_NAMES} more")
    title = escape(f"{edge.source} → {edge.target}: " + ", ".join(names))
    if edge.source == edge.target:
        x, y = sx + _NODE_W - 20, sy
        path = f"M{x},{y} C{x + 40},{y - 45} {x + 70},{y + 5} {sx + _NODE_W},{y + 15}"
        lx, ly = x + 30, y - 22
    else:
        x1, y1 = sx + _NODE_W, sy + _NODE_H // 2
        x2, y2 = tx, ty + _NODE_H // 2
        if tx <= sx:
            # Backwards (or within a column): leave from the bottom and arc below.
            x1, y1 = sx + _NODE_W // 2, sy + _NODE_H
            x2, y2 = tx + _NODE_W // 2, ty + _NODE_H
            bend = max(y1, y2) + 45
            path = f"M{x1},{y1} C{x1},{bend} {x2},{bend} {x2},{y2}"
            lx, ly = (x1 + x2) // 2, bend - 8
        else:
            mid = (x1 + x2) // 2
            path = f"M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}"
            lx, ly = mid, (y1 + y2) // 2 - 6
    return (
        f'<g class="edge" data-source="{escape(edge.source)}" data-target="{escape(edge.target)}">'
        f"<title>{title}</title>"
        f'<path d="{path}" fill="none" stroke="#555" marker-end="url(#arrow)"/>'
        f'<text x="{lx}" y="{ly}" text-anchor="middle" class="edge-label">'
        f"{escape(edge.label)}</text></g>"
    )
