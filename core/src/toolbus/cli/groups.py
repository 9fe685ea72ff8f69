"""``toolbus groups``: every tool group in a configuration, with its tools' states.

Answers the spec's "group discovery" question offline: which groups exist,
which tools each one holds, in which states those tools are offered and which
state a successful call moves to.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from toolbus.application.live.config_files import load_registry_from_path
from toolbus.cli._app import app
from toolbus.cli._common import ConfigOption, config_path
from toolbus.cli.plugin_api import fail
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError

_ANY_STATE = "(any)"
_NO_CHANGE = "-"


class GroupsFormat(enum.StrEnum):
    """How ``toolbus groups`` prints its answer."""

    table = "table"
    json = "json"


@app.command("groups")
def groups_command(
    config: ConfigOption = None,
    output: Annotated[
        GroupsFormat, typer.Option("--format", "-f", help="table or json.")
    ] = GroupsFormat.table,
) -> None:
    """List every tool group with its tools, their applicable states and transitions.

    A tool in several groups is listed under each. Tools configured with an
    empty group list belong to no group and are never offered; they are listed
    separately.
    """
    try:
        config = config_path(config)
        registry = load_registry_from_path(config)
    except ConfigError as exc:
        fail(f"{config}: {exc}")
    if output is GroupsFormat.json:
        typer.echo(json.dumps(_as_json(registry), indent=2))
    else:
        typer.echo(_table(registry))


def _ungrouped(registry: Registry) -> list[ToolDescriptor]:
    return [tool for tool in registry.tools.values() if not tool.groups]


def _tool_json(tool: ToolDescriptor) -> dict[str, Any]:
    return {
        "name": tool.name,
        "llm-name": tool.llm_name,
        "applicable-states": (
            None if tool.applicable_states is None else list(tool.applicable_states)
        ),
        "state": tool.state,
    }


def _as_json(registry: Registry) -> dict[str, Any]:
    # "applicable-states": null means every state; "state": null means no transition.
    return {
        "groups": {
            group: [_tool_json(tool) for tool in tools]
            for group, tools in registry.groups().items()
        },
        "ungrouped": [_tool_json(tool) for tool in _ungrouped(registry)],
    }


def _states(tool: ToolDescriptor) -> str:
    if tool.applicable_states is None:
        return _ANY_STATE
    return ", ".join(tool.applicable_states) or "(none)"


def _rows(group: str, tools: Sequence[ToolDescriptor]) -> list[list[str]]:
    rows = []
    for index, tool in enumerate(tools):
        # The group name once per block reads better than repeating it on every line.
        rows.append(
            [group if index == 0 else "", tool.name, _states(tool), tool.state or _NO_CHANGE]
        )
    return rows


def _table(registry: Registry) -> str:
    groups = registry.groups()
    ungrouped = _ungrouped(registry)
    total = len(registry.tools)
    summary = (
        f"{len(groups)} group{'s' if len(groups) != 1 else ''}, "
        f"{total} tool{'s' if total != 1 else ''}"
    )
    if not groups and not ungrouped:
        return f"{summary}: no tools are configured"
    rows = [["GROUP", "TOOL", "OFFERED IN STATES", "NEXT STATE"]]
    for group, tools in groups.items():
        rows.extend(_rows(group, tools))
    if ungrouped:
        rows.extend(_rows("(no group)", ungrouped))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = [summary, ""]
    for row in rows:
        lines.append(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    if ungrouped:
        lines += ["", "Tools with no group are never offered: give them a group to use them."]
    return "\n".join(lines)
