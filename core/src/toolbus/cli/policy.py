"""``toolbus policy check`` and ``toolbus policy schema``: the call policy, before a door starts.

Both read the policy files ``[policy]`` names, as a door does at start, with
the configuration the door would serve (``--config``, ``TOOLBUS_CONFIG``, or
``config`` in ``toolbus.toml``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from toolbus.cli._app import app
from toolbus.cli._common import ConfigOption, fail
from toolbus.cli._help import CommandApp
from toolbus.domain.config.registry import Registry
from toolbus.domain.errors import ConfigError, PluginError
from toolbus.ports import PolicyEngine
from toolbus.runtime import build_registry, policy_engine
from toolbus.settings import load_settings

policy_app = CommandApp(
    name="policy",
    no_args_is_help=True,
    help="The call policy (\\[policy] in toolbus.toml): check it, print what it can refer to.",
)
app.add_typer(policy_app)


def _load(config: Path | None) -> tuple[PolicyEngine, Registry]:
    try:
        settings = load_settings(config=config)
        registry = build_registry(settings)
        base = settings.file_path.parent if settings.file_path is not None else Path.cwd()
        # A check reads the files once: no thread follows them.
        table: dict[str, Any] = dict(settings.file)
        if isinstance(table.get("policy"), dict):
            table["policy"] = {**table["policy"], "reload": False}
        engine = policy_engine(table, base)
    except (ConfigError, PluginError) as exc:
        fail(str(exc))
    if engine is None:
        fail("toolbus.toml has no [policy] table: there is no call policy to check")
    return engine, registry


@policy_app.command("check")
def check(config: ConfigOption = None) -> None:
    """Check the policy files against the configuration; exit 2 naming each problem's file
    and line, and the fix."""
    engine, registry = _load(config)
    try:
        problems = engine.check(registry)
    finally:
        engine.close()
    if problems:
        fail(str(ConfigError(problems)))
    count = engine.policy_count
    typer.echo(
        f"ok: {count} polic{'y' if count == 1 else 'ies'}, checked against the configuration"
    )


@policy_app.command("schema")
def schema(config: ConfigOption = None) -> None:
    """Print what policies can refer to on the configuration (Cedar: its schema)."""
    engine, registry = _load(config)
    try:
        typer.echo(engine.describe(registry))
    finally:
        engine.close()
