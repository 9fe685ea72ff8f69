"""``toolbus tools``: which tools a request with these groups and this state would get."""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from typing import Annotated, Any

import typer

from toolbus.application.live.config_files import load_registry_from_path
from toolbus.cli._app import app
from toolbus.cli._common import ConfigOption, config_path
from toolbus.cli._live import DEFAULT_WAIT, LiveOption, WaitOption, is_live, live_registry
from toolbus.cli.plugin_api import fail
from toolbus.domain.config.descriptors import ToolDescriptor
from toolbus.domain.config.registry import Availability, normalize_groups, normalize_state
from toolbus.domain.config.schemas import ExportFormat, export_tools
from toolbus.domain.errors import ConfigError
from toolbus.settings import load_settings

_DESCRIPTION_WIDTH = 60


class OutputFormat(enum.StrEnum):
    """How ``toolbus tools`` prints its answer."""

    table = "table"
    json = "json"
    openai = "openai"
    mcp = "mcp"
    anthropic = "anthropic"


_EXPORT_FORMATS: dict[OutputFormat, ExportFormat] = {
    OutputFormat.openai: "openai",
    OutputFormat.mcp: "mcp",
    OutputFormat.anthropic: "anthropic",
}


@app.command("tools")
def tools_command(
    config: ConfigOption = None,
    group: Annotated[
        list[str] | None,
        typer.Option(
            "--group",
            "-g",
            help="Requested tool group; repeat for several. '*' asks for every tool. "
            "Omitted: the 'default' group.",
        ),
    ] = None,
    no_groups: Annotated[
        bool,
        typer.Option("--no-groups", help="Request an explicit empty group list (offers no tools)."),
    ] = False,
    state: Annotated[
        str | None,
        typer.Option("--state", "-s", help="Agent state; omitted or empty means 'undefined'."),
    ] = None,
    output: Annotated[
        OutputFormat,
        typer.Option("--format", "-f", help="table, json, or an LLM tool list."),
    ] = OutputFormat.table,
    broker: Annotated[
        str | None,
        typer.Option(
            metavar="URL",
            help="Broker URL for live mode; default from TOOLBUS_BROKER or toolbus.toml.",
        ),
    ] = None,
    live: LiveOption = None,
    wait: WaitOption = DEFAULT_WAIT,
) -> None:
    """List the tools offered for the requested groups in a state.

    Applies the same group and state filtering an agent request gets, so you can
    check a configuration before deploying it. On a broker (live mode) the tools
    of the config service and of running services are listed too.
    """
    if no_groups and group:
        raise typer.BadParameter(
            "--no-groups asks for an empty group list; do not combine it with --group",
            param_hint="'--no-groups'",
        )
    # Absent and empty requests mean different things (default group vs no tools),
    # so keep "no --group given" as None.
    requested: list[str] | None = [] if no_groups else (group or None)
    try:
        settings = load_settings(broker, config)
    except ConfigError as exc:
        fail(str(exc))
    if is_live(live, settings.broker):
        registry = live_registry(settings, wait)
    else:
        try:
            config = config_path(config)
            registry = load_registry_from_path(config)
        except ConfigError as exc:
            fail(f"{config}: {exc}")
    availability = registry.availability(requested, state)
    if output is OutputFormat.table:
        typer.echo(
            _table(availability, requested, state, len(registry.tools), list(registry.groups()))
        )
    elif output is OutputFormat.json:
        typer.echo(json.dumps([_as_json(t) for t in availability.available], indent=2))
    else:
        exported = export_tools(availability.available, _EXPORT_FORMATS[output])
        typer.echo(json.dumps(exported, indent=2))


def _as_json(tool: ToolDescriptor) -> dict[str, Any]:
    # Config values are left out on purpose: they may hold credentials.
    return {
        "key": tool.key,
        "name": tool.name,
        "llm-name": tool.llm_name,
        "type": tool.type,
        "description": tool.description,
        "service": tool.service,
        "group": list(tool.groups),
        "state": tool.state,
        "applicable-states": (
            None if tool.applicable_states is None else list(tool.applicable_states)
        ),
        "arguments": [
            {
                "name": a.name,
                "type": a.type,
                "description": a.description,
                "required": a.required,
                **a.schema_extras,
            }
            for a in tool.arguments
        ],
    }


def _list(values: Sequence[str]) -> str:
    return ", ".join(values) if values else "(none)"


def _summary(
    availability: Availability, requested: list[str] | None, state: str | None, total: int
) -> str:
    groups = normalize_groups(requested)
    if requested is None:
        asked = "group 'default' (no --group given)"
    elif not groups:
        asked = "an empty group list (--no-groups)"
    else:
        asked = f"group{'s' if len(groups) > 1 else ''} " + ", ".join(map(repr, groups))
    shown = f"state {normalize_state(state)!r}" + ("" if state else " (no --state given)")
    count = len(availability.available)
    line = f"{count} of {total} tool{'s' if total != 1 else ''} offered for {asked} in {shown}"
    skipped = []
    if availability.filtered_by_group:
        skipped.append(f"{len(availability.filtered_by_group)} by group")
    if availability.filtered_by_state:
        skipped.append(f"{len(availability.filtered_by_state)} by state")
    return line + (f"; filtered out {' and '.join(skipped)}" if skipped else "")


def _hints(availability: Availability, registry_groups: Sequence[str]) -> list[str]:
    # An empty answer is usually a question asked wrongly; say what would get tools.
    if availability.filtered_by_group and registry_groups:
        return [f"groups in this configuration: {', '.join(registry_groups)} (or '*' for all)"]
    return []


def _table(
    availability: Availability,
    requested: list[str] | None,
    state: str | None,
    total: int,
    registry_groups: Sequence[str],
) -> str:
    lines = [_summary(availability, requested, state, total)]
    tools = availability.available
    if not tools:
        return "\n".join(lines + _hints(availability, registry_groups))
    show_llm_name = any(t.llm_name != t.name for t in tools)
    header = ["NAME", *(["LLM NAME"] if show_llm_name else []), "GROUPS", "STATES", "NEXT STATE"]
    header += ["SERVICE", "DESCRIPTION"]
    rows = [header]
    for tool in tools:
        states = "(any)" if tool.applicable_states is None else _list(tool.applicable_states)
        description = tool.description.splitlines()[0] if tool.description else ""
        if len(description) > _DESCRIPTION_WIDTH:
            description = description[: _DESCRIPTION_WIDTH - 3] + "..."
        row = [tool.name, *([tool.llm_name] if show_llm_name else []), _list(tool.groups)]
        row += [states, tool.state or "-", tool.service or "-", description]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines.append("")
    for row in rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths, strict=False)]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)
