"""``toolbus plugins``: what is installed, with versions."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from toolbus.cli._app import app
from toolbus.plugins import InstalledPlugin, installed_plugins


@app.command("plugins")
def plugins(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List installed broker adapters, LLM adapters, state stores, policy engines, tool
    plugins and commands."""
    found = installed_plugins()
    if as_json:
        typer.echo(json.dumps([dataclasses.asdict(p) for p in found], indent=2))
        return
    width = max((len(p.name) for p in found), default=4)
    for kind, title in (
        ("adapter", "Broker adapters"),
        ("llm", "LLM adapters"),
        ("state", "State stores"),
        ("tools", "Tool plugins"),
    ):
        _section(title, [p for p in found if p.kind == kind], width)
    # Listed only when present, so a bare core install reads as before.
    for kind, title in (("policy", "Policy engines"), ("commands", "Commands")):
        rows = [p for p in found if p.kind == kind]
        if rows:
            _section(title, rows, width)


def _section(title: str, rows: list[InstalledPlugin], width: int) -> None:
    typer.echo(f"{title}:")
    for p in rows:
        typer.echo(f"  {p.name:<{width}}  {p.distribution} {p.version}")
    if not rows:
        typer.echo("  (none)")
